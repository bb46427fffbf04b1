"""The ignore-list check on a checkpoint shaped like Google's -qat-w4a16-ct: packed text linears,
16-bit towers, 16-bit embeddings, a duplicate 16-bit lm_head. A 16-bit Linear the list misses is
what made vLLM fail at load in the public reproduction ('vision_embedder.patch_dense.weight')."""
from __future__ import annotations

from harness.package.ignore import check_ignore

PACKED = {f"model.language_model.layers.0.{m}.{p}": s
          for m in ("self_attn.q_proj", "mlp.down_proj")
          for p, s in (("weight_packed", (64, 8)), ("weight_scale", (64, 2)), ("weight_shape", (2,)))}
SIXTEEN = {
    "model.language_model.embed_tokens.weight": (128, 64),
    "model.language_model.embed_tokens_per_layer.weight": (128, 256),
    "model.vision_tower.encoder.layers.0.mlp.fc1.linear.weight": (64, 64),
    "model.vision_tower.patch_embedder.input_proj.weight": (64, 48),
    "model.embed_vision.embedding_projection.weight": (64, 64),
    "model.language_model.layers.0.input_layernorm.weight": (64,),
    "lm_head.weight": (128, 64),
}


def _config(ignore):
    return {"config_groups": {"group_0": {"targets": ["Linear"]}}, "ignore": ignore}


def test_complete_list_passes_and_names_what_it_ignores():
    r = check_ignore({**PACKED, **SIXTEEN}, _config(["lm_head", "re:.*vision_tower.*", "re:.*embed_vision.*"]),
                     tied_lm_head=False)
    assert r.ok and r.problems == [] and r.quantized_modules == 2
    assert "model.embed_vision.embedding_projection" in r.ignored_16bit_linears


def test_a_missed_16bit_linear_and_a_stale_entry_are_reported():
    r = check_ignore({**PACKED, **SIXTEEN}, _config(["lm_head", "re:.*vision_tower.*", "re:.*audio_tower.*"]),
                     tied_lm_head=False)
    assert not r.ok
    assert ("model.embed_vision.embedding_projection: 16-bit Linear not on the ignore list "
            "(vLLM would look for model.embed_vision.embedding_projection.weight_packed)") in r.problems
    assert "ignore entry 're:.*audio_tower.*' names no module of the checkpoint" in r.problems


def test_packed_module_on_the_list_and_untargeted_embedding_are_reported():
    shapes = {**PACKED, "model.embed_tokens.weight_packed": (128, 8), "model.embed_tokens.weight_scale": (128, 2),
              "model.embed_tokens.weight_shape": (2,)}
    r = check_ignore(shapes, _config(["model.language_model.layers.0.mlp.down_proj", "lm_head"]), tied_lm_head=True)
    assert "model.language_model.layers.0.mlp.down_proj: stored packed but on the ignore list" in r.problems
    assert "model.embed_tokens: stored packed but no config group targets it" in r.problems
