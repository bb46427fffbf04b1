"""A tiny Gemma-4-shaped checkpoint, built in the test: real tensor names and shapes from
transformers' Gemma 4 text model (meta device), values on the int4 grid, plus tower tensors."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

TEXT_CONFIG = {
    "model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 4, "intermediate_size": 128,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "global_head_dim": 64,
    "vocab_size": 128, "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 32,
    "vocab_size_per_layer_input": 128, "sliding_window": 16, "use_double_wide_mlp": True,
    "tie_word_embeddings": True,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
}
TOWERS = {  # a few tensors shaped like the towers the package drops
    "model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight": (64, 64),
    "model.embed_vision.embedding_projection.weight": (64, 64),
    "model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight": (64, 64),
    "model.embed_audio.embedding_projection.weight": (64, 64),
}


def on_grid(shape, gen, scale_dtype=torch.bfloat16, signed: bool = False) -> torch.Tensor:
    """bf16(d * q): q in [-8, 7], one scale d per group of 32 along rows (d bf16 or finer).
    ``signed``: d takes either sign, as llama.cpp's Q4_0 (d = max / -8) gives it."""
    rows, cols = shape
    q = torch.randint(-8, 8, (rows, cols // 32, 32), generator=gen).float()
    q[..., 0] = -8  # Q4_0: the largest magnitude maps to -8
    d = (torch.rand(rows, cols // 32, 1, generator=gen) * 0.05 + 0.001).to(scale_dtype).double()
    if signed:
        d = d * (torch.randint(0, 2, d.shape, generator=gen) * 2 - 1)
    return (q.double() * d).reshape(rows, cols).to(torch.bfloat16)


def text_shapes() -> dict[str, tuple[int, ...]]:
    from harness.package.sizes import text_shapes as shapes

    return shapes({"text_config": TEXT_CONFIG})


def make_checkpoint(d: Path, seed: int = 0, scale_dtype=torch.bfloat16, signed: bool = False) -> dict[str, torch.Tensor]:
    """Write a multimodal-named QAT-like checkpoint into ``d``; return its tensors."""
    gen = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in text_shapes().items():
        src = "model.language_model." + name[len("model."):]
        if len(shape) == 2:
            tensors[src] = on_grid(shape, gen, scale_dtype, signed)
        else:
            tensors[src] = (torch.rand(shape, generator=gen) + 0.5).to(torch.bfloat16)
    for name, shape in TOWERS.items():
        tensors[name] = torch.randn(shape, generator=gen).to(torch.bfloat16)
    d.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for fname, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(d / fname), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    config = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
              "text_config": TEXT_CONFIG, "vision_config": {"model_type": "gemma4_vision"},
              "audio_config": {"model_type": "gemma4_audio"}, "tie_word_embeddings": True,
              "eos_token_id": [1, 106], "dtype": "bfloat16"}
    (d / "config.json").write_text(json.dumps(config))
    (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    (d / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    (d / "chat_template.jinja").write_text("{{ messages }}")
    (d / "processor_config.json").write_text("{}")
    return tensors
