"""Package sizes of the real Gemma 4 E2B from its published config alone, against public figures.

Published figures (xbill9/sagemaker-gemma, ml.g6.xlarge, vLLM 0.30.0):
- docs/articles/sagemaker-gemma-formats/devto-sagemaker-gemma-formats.md, "Why the Embeddings
  Matter": GPU weights text-only 6.33 GiB, ple4 3.19 GiB, emb4 2.86 GiB; per-layer table 4.375 GiB;
  "Packing the per-layer table saves 3.14 GiB".
- evidence/runs/_emb4logs/gemma-4-E2B-it-qat-q4_0-w4a16-ct-text-ple4.log: the ple4 repack's files,
  "embed_tokens_per_layer.weight: 4.375 GiB bf16 -> 1.230 GiB int4 + f16 scales ... total 2.96 GiB".
- docs/articles/evidence/qat-safetensors-header.txt: google/gemma-4-E2B-it-qat-w4a16-ct's header,
  "transformer body 1.056 GB", "per-layer embedding 4.698 GB", "vocabulary embedding 1.611 GB
  tensors=2" (embed_tokens and the duplicate lm_head).

"GPU weights" is what vLLM reports after loading ("Model loading took X GiB memory", rounded to
0.01 GiB), not the files: it carries ~0.22 GiB more than the checkpoint for every scheme alike.
The files are compared with file figures; the GPU weights with harness.package.resident, which
adds what vLLM 0.30.0 allocates besides the package (two rotary caches, 0.1875 GiB; blocks its
load-time allocator setting leaves unsplit, 0.035 GiB; terms in tests/package/test_resident.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from kit.schemes import SCHEMES
from harness.package.sizes import sizes, text_shapes

GIB = 2**30
CONFIG = Path(__file__).parent / "fixtures" / "gemma-4-E2B-it.config.json"
GPU_WEIGHTS_GIB = {"text": 6.33, "ple4": 3.19, "emb4": 2.86}


@pytest.fixture(scope="module")
def e2b():
    shapes = text_shapes(json.loads(CONFIG.read_text()))
    return {name: sizes(shapes, SCHEMES[name]) for name in SCHEMES}


def test_ple4_files_match_the_public_repack_log(e2b):
    assert e2b["ple4"]["total"] / GIB == pytest.approx(2.96, rel=0.01)
    assert e2b["text"]["per_layer_embeddings"] / GIB == pytest.approx(4.375, rel=0.001)
    assert e2b["ple4"]["per_layer_embeddings"] / GIB == pytest.approx(1.230, rel=0.001)


def test_text_body_and_tables_match_googles_w4a16_header(e2b):
    text = e2b["text"]
    assert (text["linear"] + text["other"]) / 1e9 == pytest.approx(1.056, rel=0.01)
    assert text["per_layer_embeddings"] / 1e9 == pytest.approx(4.698, rel=0.001)
    assert 2 * text["token_embeddings"] / 1e9 == pytest.approx(1.611, rel=0.001)  # embed + duplicate


def test_scheme_differences_reproduce_the_measured_gpu_weights(e2b):
    saved_emb4 = (e2b["text"]["total"] - e2b["emb4"]["total"]) / GIB
    saved_ple4 = (e2b["text"]["total"] - e2b["ple4"]["total"]) / GIB
    assert saved_emb4 == pytest.approx(GPU_WEIGHTS_GIB["text"] - GPU_WEIGHTS_GIB["emb4"], rel=0.01)
    assert saved_ple4 == pytest.approx(3.14, rel=0.01)


def test_gpu_weights_exceed_files_by_one_constant(e2b):
    over = [GPU_WEIGHTS_GIB[n] - e2b[n]["total"] / GIB for n in GPU_WEIGHTS_GIB]
    assert max(over) - min(over) < 0.011  # vLLM's non-checkpoint allocation, the same for each
    assert 0.15 < min(over) < 0.3


@pytest.mark.parametrize("name", sorted(GPU_WEIGHTS_GIB))
def test_vllm_resident_reproduces_the_published_gpu_weights(name):
    from harness.package.resident import load

    held = load(json.loads(CONFIG.read_text()), SCHEMES[name])["total"] / GIB
    assert held == pytest.approx(GPU_WEIGHTS_GIB[name], rel=0.01)
    assert round(held, 2) == GPU_WEIGHTS_GIB[name]  # vLLM's format_gib: round(bytes / GiB, 2)


def test_emb4_stores_lm_head_once_and_untied(e2b):
    emb4 = e2b["emb4"]
    assert emb4["lm_head"] == emb4["token_embeddings"]
    assert e2b["text"]["lm_head"] == 0  # tied: no duplicate (Google's build stores one, 0.75 GiB)


def test_int8_linears_weigh_about_twice_int4(e2b):
    ratio = e2b["int8"]["linear"] / e2b["text"]["linear"]
    assert 1.7 < ratio < 1.9  # 1 byte + a per-row scale vs 0.5 byte + a scale per 32


def test_reads_per_token_explain_the_measured_speeds():
    """ple4 reads what text reads (the per-layer table is only looked up) and decodes at the same
    speed (104.1 vs 103.0 tok/s); emb4 reads ~31% less (lm_head in int4) and decodes 1.38x."""
    from harness.package.reads import bytes_read_per_token
    from harness.package.sizes import table_rows

    shapes = text_shapes(json.loads(CONFIG.read_text()))
    rows = table_rows(shapes)
    read = {n: bytes_read_per_token(sizes(shapes, SCHEMES[n]), rows) for n in ("text", "ple4", "emb4")}
    assert read["ple4"] == pytest.approx(read["text"], rel=1e-4)  # one looked-up row differs
    assert 1.3 < read["text"] / read["emb4"] < 1.5  # measured 141.7 / 103.0 = 1.38


def test_reads_per_token_agree_with_the_cost_models_architecture():
    from harness.cost.architecture import GEMMA_4_E2B
    from harness.package.reads import bytes_read_per_token
    from harness.package.sizes import table_rows

    shapes = text_shapes(json.loads(CONFIG.read_text()))
    ours = bytes_read_per_token(sizes(shapes, SCHEMES["emb4"]), table_rows(shapes))
    theirs = GEMMA_4_E2B.weights_read_per_token("int4", "int4", group_size=32)
    assert ours == pytest.approx(theirs, rel=0.002)


def test_the_tensor_set_the_checks_expect_is_the_published_checkpoints():
    """The build and ``check`` refuse any tensor the config does not imply (tests/package/
    test_hostile_tensors.py), so the implied set must be the real one. Google's E2B
    -qat-w4a16-ct header (docs/articles/evidence/qat-safetensors-header.txt, xbill9/sagemaker-gemma
    at 6c18089f) counts "transformer body ... tensors=1090": every Linear of the text model as a
    packed triple plus the norms and scalars, the two embedding tables and lm_head counted apart.
    The KV-shared layers having no k_proj/v_proj/k_norm is what makes it 1090."""
    from harness.package import layout

    shapes = text_shapes(json.loads(CONFIG.read_text()))
    body = {n: s for n, s in shapes.items() if n not in (layout.EMBED, layout.PLE)}
    linears = [n for n, s in body.items() if layout.group_of(n, s) == "linear"]
    assert 3 * len(linears) + (len(body) - len(linears)) == 1090
