"""The compressed-tensors release the package build and its tests use is the one the served vLLM
declares: read from vLLM 0.30.0's published metadata (fixtures/vllm-0.30.0.requires.json, source in
the file), not from what the kit assumes."""
from __future__ import annotations

import json
import re
from pathlib import Path

from harness.package import build

ROOT = Path(__file__).resolve().parents[2]
VLLM = json.loads((Path(__file__).parent / "fixtures" / "vllm-0.30.0.requires.json").read_text())


def _pin(lines: list[str], name: str) -> str:
    for line in lines:
        m = re.match(rf"^{re.escape(name)}\s*==\s*([^\s;#]+)", line.strip(), re.I)
        if m:
            return m.group(1)
    raise AssertionError(f"{name} is not pinned with == in {lines[:3]}…")


def test_the_recorded_metadata_is_vllm_0_30_0():
    assert (VLLM["name"], VLLM["version"]) == ("vllm", "0.30.0")


def test_package_stage_pins_the_compressed_tensors_vllm_declares():
    served = _pin(VLLM["requires_dist"], "compressed-tensors")
    kit = _pin((ROOT / "requirements-package.txt").read_text().splitlines(), "compressed-tensors")
    assert kit == served == build.CT_VERSION


def test_the_kit_and_vllm_agree_on_transformers_major():
    # vLLM 0.30.0 declares transformers>=5.10.4; the build reads configs with the kit's 5.x pin.
    spec = next(d for d in VLLM["requires_dist"] if d.startswith("transformers"))
    low = re.search(r">=\s*([\d.]+)", spec).group(1)
    kit = _pin((ROOT / "requirements-package.txt").read_text().splitlines(), "transformers")
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(kit) >= as_tuple(low)


def test_the_sagemaker_containers_vllm_declares_the_same_compressed_tensors():
    # SageMaker serves a package with the vLLM of the DLC tag the kit pins (its version is the tag's
    # first field); that release's published metadata is recorded next to 0.30.0's.
    from kit.config import DEFAULTS

    version = DEFAULTS["sagemaker_vllm_tag"].split("-", 1)[0]
    recorded = json.loads((Path(__file__).parent / "fixtures" / f"vllm-{version}.requires.json").read_text())
    assert recorded["version"] == version
    assert _pin(recorded["requires_dist"], "compressed-tensors") == build.CT_VERSION
