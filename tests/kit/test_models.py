"""Gemma 4 model facts (kit/models.py) against transformers' own modules and the model cards."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit import models as km

FIXTURE = Path(__file__).resolve().parents[1] / "package" / "fixtures" / "gemma-4-E2B-it.config.json"


def _hf_layer_counts(size: str) -> tuple[list[int], int]:
    torch = pytest.importorskip("torch")
    cfg = dict(km.TEXT_CONFIGS[size])
    if size == "12B":  # the encoder-free "unified" 12B has its own module
        from transformers.models.gemma4_unified.configuration_gemma4_unified import Gemma4UnifiedTextConfig as C
        from transformers.models.gemma4_unified.modeling_gemma4_unified import Gemma4UnifiedTextModel as M
    else:
        from transformers import Gemma4TextConfig as C
        from transformers.models.gemma4.modeling_gemma4 import Gemma4TextModel as M
    with torch.device("meta"):
        model = M(C(**cfg))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return [count(layer) for layer in model.layers], count(model)


@pytest.mark.parametrize("size", list(km.MODELS))
def test_counts_match_transformers_layer_by_layer(size):
    layers, total = _hf_layer_counts(size)
    arch = km.MODELS[size].arch
    assert [arch.layer_params(i) for i in range(arch.layers)] == layers
    assert arch.total_params == total


def test_totals_match_the_model_cards():
    # 26B A4B card: "Total model parameters | 25.2B", "Active model parameters | 3.8B".
    moe = km.MODELS["26B-A4B"]
    assert moe.is_moe and round(moe.arch.total_params / 1e9, 1) == 25.2
    assert round(moe.arch.active_params / 1e9, 1) == 3.8
    # Google's overview names the dense sizes 31B and 12B.
    assert round(km.MODELS["31B"].arch.total_params / 1e9) == 31
    assert round(km.MODELS["12B"].arch.total_params / 1e9) == 12
    for dense in ("E2B", "E4B", "12B", "31B"):
        assert km.MODELS[dense].arch.active_params == km.MODELS[dense].arch.total_params


def test_e2b_is_the_fixture_config():
    data = json.loads(FIXTURE.read_text())
    assert km.load_config(FIXTURE) == km.from_text_config(FIXTURE.parent.name, data, source=str(FIXTURE))
    fixture = km.load_config(FIXTURE)
    e2b = km.GEMMA_4_E2B
    for field in ("hidden", "layers", "intermediate", "heads", "kv_heads", "head_dim", "vocab", "layer_types",
                  "sliding_window", "global_head_dim", "kv_shared_layers", "double_wide_mlp", "ple_dim"):
        assert getattr(fixture, field) == getattr(e2b, field), field


def test_moe_token_reads_only_its_experts():
    a = km.MODELS["26B-A4B"].arch
    # 30 layers x 128 experts x 3 x 2816 x 704 expert weights, of which 8 of 128 are read.
    experts = 30 * 128 * 3 * 2816 * 704
    assert a.inactive_expert_params == experts * 120 // 128
    assert a.weights_read_per_token("bf16") == pytest.approx(
        (a.decoder_params - experts * 120 / 128) * 2 + 262144 * 2816 * 2 + 2816 * 2)


def test_k_eq_v_full_layers_cache_fewer_heads():
    a = km.MODELS["31B"].arch
    # 50 sliding layers (16 KV heads x 256, window 1024) + 10 full layers (4 KV heads x 512), bf16 K and V.
    assert a.kv_cache_bytes(4096) == 50 * 2 * 1024 * 16 * 256 * 2 + 10 * 2 * 4096 * 4 * 512 * 2
    # E2B: the 20 KV-shared layers hold no cache of their own.
    e = km.GEMMA_4_E2B
    assert e.kv_cache_bytes(4096) == 12 * 2 * 512 * 1 * 256 * 2 + 3 * 2 * 4096 * 1 * 512 * 2


@pytest.mark.parametrize("word,size", [("E2B", "E2B"), ("e4b", "E4B"), ("26B", "26B-A4B"), ("26b-a4b", "26B-A4B"),
                                       ("google/gemma-4-31B-it", "31B"), ("google/gemma-4-E2B-it-qat-w4a16-ct", "E2B"),
                                       ("google/gemma-4-26B-A4B-it", "26B-A4B"), ("google/gemma-3-27b-it", None),
                                       ("Qwen/Qwen3-Coder-30B-A3B-Instruct", None)])
def test_size_words_and_ids(word, size):
    assert km.size_of(word) == size


def test_default_precision_reads_the_id():
    assert km.default_precision("google/gemma-4-E2B-it-qat-w4a16-ct") == "int4"
    assert km.default_precision("google/gemma-4-31B-it") == "bf16"


def test_bad_config_file_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="no 'num_hidden_layers'"):
        km.load_config(tmp_path / "config.json")
    with pytest.raises(ValueError, match="missing.json: no such file"):
        km.load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        km.load_config(tmp_path / "bad.json")
