"""Gemma 4 E2B parameter counts against transformers' own Gemma 4 module (meta device, no weights)."""
from __future__ import annotations

import pytest

from harness.cost.architecture import GEMMA_4_E2B as G, weight_bytes


@pytest.fixture(scope="module")
def hf_model():
    torch = pytest.importorskip("torch")
    from transformers import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextModel

    cfg = Gemma4TextConfig(
        hidden_size=G.hidden, num_hidden_layers=G.layers, intermediate_size=G.intermediate,
        num_attention_heads=G.heads, num_key_value_heads=G.kv_heads, head_dim=G.head_dim,
        global_head_dim=G.global_head_dim, vocab_size=G.vocab, num_kv_shared_layers=G.kv_shared_layers,
        hidden_size_per_layer_input=G.ple_dim, vocab_size_per_layer_input=G.ple_vocab,
        sliding_window=G.sliding_window, use_double_wide_mlp=G.double_wide_mlp, tie_word_embeddings=True,
        layer_types=[{"sliding": "sliding_attention", "full": "full_attention"}[t] for t in G.layer_types])
    with torch.device("meta"):
        return Gemma4TextModel(cfg)


def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_every_layer_matches_transformers(hf_model):
    assert [G.layer_params(i) for i in range(G.layers)] == [_count(ln) for ln in hf_model.layers]


def test_model_totals_match_transformers(hf_model):
    assert G.embed_params == _count(hf_model.embed_tokens)
    assert G.ple_table_params == _count(hf_model.embed_tokens_per_layer)
    assert G.total_params == _count(hf_model)


def test_embeddings_dominate_storage_but_not_reads():
    # The PLE table is ~half the text weights at rest and is only looked up per token.
    assert G.ple_table_params / G.total_params > 0.5
    read = G.weights_read_per_token("bf16")
    assert read < 0.55 * G.total_params * 2  # 2 bytes a weight at rest in bf16
    assert read > (G.decoder_params + G.embed_params) * 2  # tied LM head is read whole


def test_kv_cache_grows_with_context_and_sliding_layers_cap():
    assert G.kv_read_per_token(0) == 0
    # Past the 512-token window only the 7 full-attention layers keep growing.
    per_extra_token = G.kv_read_per_token(2048) - G.kv_read_per_token(2047)
    assert per_extra_token == 7 * 2 * 1 * 512 * 2


def test_weight_bytes_include_group_scales():
    assert weight_bytes("bf16") == 2.0
    assert weight_bytes("int4", 128) == pytest.approx(0.5 + 2 / 128)
    with pytest.raises(ValueError, match="valid"):
        weight_bytes("int3")
