"""The Turing shared-memory patch against the real pinned vLLM sdist from PyPI.

Marked `network` (PyPI is the one network the kit's tests may reach); part of the default run.
The sdist is cached under .cache/sdists/, so only the first run downloads (~42 MB).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from ami import check_patch
from kit import pins
from tests.conftest import require_binary

pytestmark = pytest.mark.network

KERNEL = "vllm/v1/attention/ops/triton_unified_attention.py"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    require_binary("patch")  # make sysdeps installs it; CI fails instead of skipping
    return check_patch.patched_tree(tmp_path_factory.mktemp("vllm"))


def test_patch_applies_to_the_pinned_sdist(tree):
    # patched_tree raised if the dry run or the apply failed; the new code must be there.
    src = (tree / KERNEL).read_text()
    assert "def _needs_small_tiles(" in src and "small_smem=small_smem" in src
    ast.parse(src)


def test_torch_pin_matches_the_sdist(tree):
    cuda_txt = (tree / "requirements/cuda.txt").read_text()
    assert re.search(rf"^torch=={re.escape(pins.TORCH_VERSION)}\s*$", cuda_txt, re.M)
    assert f'"torch == {pins.TORCH_VERSION}"' in (tree / "pyproject.toml").read_text()


def test_a_patch_that_does_not_match_is_reported(tmp_path):
    fresh = check_patch.extract(check_patch.fetch_sdist(), check_patch.patched_paths(), tmp_path / "src")
    bad = tmp_path / "bad.patch"
    # A context line the pinned source does not have, as after an upstream refactor.
    bad.write_text(check_patch.PATCH.read_text().replace(" def _get_tile_size(", " def _get_tile_sz(", 1))
    with pytest.raises(check_patch.PatchCheckError, match="does not apply to vllm-"):
        check_patch.apply_patch(fresh, bad)
    assert "_needs_small_tiles" not in (fresh / KERNEL).read_text()  # nothing half-applied


def _patched_functions(tree: Path, smem: int) -> dict:
    """Run the patched tile-size helpers (pure Python) with a given shared-memory size."""
    mod = ast.parse((tree / KERNEL).read_text())
    keep = {"_SMALL_SMEM_BYTES", "_is_gemma3_attention", "_needs_small_tiles", "_get_tile_size"}
    body = [n for n in mod.body
            if (isinstance(n, ast.FunctionDef) and n.name in keep)
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") in keep for t in n.targets))]
    logs: list[str] = []

    class Logger:
        def info_once(self, msg, *args, **_):
            logs.append(msg % args)

    ns = {"torch": torch, "logger": Logger(), "_max_shared_mem_per_block": lambda device: smem}
    exec(compile(ast.Module(body=body, type_ignores=[]), KERNEL, "exec"), ns)  # noqa: S102
    ns["logs"] = logs
    return ns


@pytest.mark.parametrize("smem, head, small", [
    (65536, 512, True),    # T4 / T4G (sm_75): 64 KB per block
    (101376, 512, False),  # A10G / L4 (sm_86 / sm_89): 99 KB, the default tiles fit
    (65536, 256, False),   # Gemma 4 sliding-window layers: default tiles fit on Turing
    (0, 512, False),       # not a CUDA device: leave the defaults alone
])
def test_small_tiles_only_for_large_heads_on_small_shared_memory(tree, smem, head, small):
    ns = _patched_functions(tree, smem)
    cpu = torch.device("cpu")
    assert ns["_needs_small_tiles"](head, cpu) is small
    prefill = ns["_get_tile_size"](head, 0, 2, is_prefill=True, small_smem=small)
    assert prefill == (16 if small else 32)
    if small:
        assert ns["_get_tile_size"](head, 0, 1, is_prefill=True, small_smem=True) == 32  # fp8 floor
        assert "smaller tiles" in ns["logs"][0]
