"""Run inside a Python whose transformers is the one under test; prints one JSON object.

    python probe.py imports                 # import every NxD Inference module the engine and the port use
    python probe.py construct MODEL_DIR     # build the engine's NeuronConfig and the port's config on 0.8
    python probe.py construct MODEL_DIR --without-compat   # the same with NxD Inference's loaders
    python probe.py all MODEL_DIR           # the three above in one process: {"imports", "compat", "without"}

NxD Inference 0.8's source and the port's modules come from beside this file (PROVENANCE.md);
the Neuron-only packages are stubbed at the import boundary (neuron_stubs.py).
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(HERE), str(HERE / "src"), str(HERE / "port"), str(ROOT)]

import neuron_stubs  # noqa: E402

neuron_stubs.install()

# Every NxD Inference module the engine (ami/neuron/neuron_generator.py) and the port it loads
# (modeling_gemma4_e2b.py, ndxi_patch.py at 6aa6121) import, with the names they take from each.
NXDI_IMPORTS = {
    "neuronx_distributed_inference": ["__version__"],
    "neuronx_distributed_inference.utils.hf_adapter": ["HuggingFaceGenerationAdapter", "load_pretrained_config", "to_dict"],
    "neuronx_distributed_inference.models.config": ["InferenceConfig", "NeuronConfig", "to_torch_dtype"],
    "neuronx_distributed_inference.models.model_base": ["NeuronBaseForCausalLM", "NeuronBaseModel"],
    "neuronx_distributed_inference.models.image_to_text_model_base": ["NeuronBaseForImageToText"],
    "neuronx_distributed_inference.modules.attention.attention_base": ["NeuronAttentionBase", "move_heads_front"],
    "neuronx_distributed_inference.modules.attention.utils": ["RotaryEmbedding", "apply_rotary_pos_emb", "_rotate_half",
                                                              "get_last_kv_window"],
    "neuronx_distributed_inference.modules.attention.gqa": ["determine_sharding_strategy", "get_shardable_head_counts"],
    "neuronx_distributed_inference.modules.kvcache.kv_cache_manager": ["KVCacheManager"],
    "neuronx_distributed_inference.modules.kvcache.utils": ["get_kv_shapes"],
    "neuronx_distributed_inference.modules.custom_calls": ["CustomRMSNorm"],
    # create_sampler's module at 0.8 (the port tries this path first, then modules.sampling.utils)
    "neuronx_distributed_inference.modules.generation.sampling": ["create_sampler", "prepare_sampling_params"],
    "neuronx_distributed_inference.utils.tensor_replacement.registry": ["TensorReplacementRegister"],
}
PORT_MODULES = ("modeling_gemma4_e2b", "ndxi_patch")


def imports() -> dict:
    out = {"transformers": importlib.import_module("transformers").__version__, "modules": {}}
    for name, attrs in {**NXDI_IMPORTS, **{m: [] for m in PORT_MODULES}}.items():
        try:
            mod = importlib.import_module(name)
            missing = [a for a in attrs if not hasattr(mod, a)]
            out["modules"][name] = f"missing {missing}" if missing else "ok"
        except Exception as e:  # noqa: BLE001 - reported, not raised: the test reads every line
            out["modules"][name] = f"{type(e).__name__}: {e}"
    return out


def construct(model_dir: str, compat: bool) -> dict:
    import torch

    from ami.neuron import nxdi_compat
    from ami.neuron.neuron_config import make_shapes, plan
    import ndxi_patch
    from neuronx_distributed_inference.models.config import NeuronConfig
    from neuronx_distributed_inference.utils.hf_adapter import load_pretrained_config
    from modeling_gemma4_e2b import Gemma4E2BInferenceConfig, NeuronGemma4E2BForCausalLM  # noqa: F401

    out: dict = {}
    ndxi_patch.apply_patch()  # the engine applies it when the port ships it (neuron_generator.build_model)
    model_config = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = plan(model_config, neuron_cores=2, tp_degrees=(1, 2), platform="inf2", shapes=make_shapes((128,), 256, 2),
               sdk_version="0.8.0", model_name="tiny")
    neuron_config_cls = Gemma4E2BInferenceConfig.get_neuron_config_cls()
    neuron_config = neuron_config_cls(**cfg.neuron_config_kwargs(), torch_dtype=torch.bfloat16)
    out["neuron_config_cls"] = neuron_config_cls.__module__ + "." + neuron_config_cls.__name__
    out["neuron_config"] = {k: getattr(neuron_config, k) for k in (
        "tp_degree", "batch_size", "max_batch_size", "ctx_batch_size", "tkg_batch_size", "seq_len",
        "max_context_length", "enable_bucketing", "context_encoding_buckets", "token_generation_buckets",
        "padding_side", "attn_kernel_enabled", "fused_qkv", "logical_nc_config", "save_sharded_checkpoint",
        "is_continuous_batching")}
    out["neuron_config"]["torch_dtype"] = str(neuron_config.torch_dtype)
    out["is_neuron_config"] = isinstance(neuron_config, NeuronConfig)
    loader = nxdi_compat.load_config(model_dir) if compat else load_pretrained_config(model_dir)
    try:
        config = Gemma4E2BInferenceConfig(neuron_config, load_config=loader)
        out["config"] = {k: getattr(config, k, None) for k in (
            "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "global_head_dim", "layer_types", "hidden_size_per_layer_input", "num_kv_shared_layers")}
        out["config"]["torch_dtype"] = str(config.neuron_config.torch_dtype)
    except Exception as e:  # noqa: BLE001
        out["config_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    try:
        if compat:
            tok = nxdi_compat.load_tokenizer(model_dir)
        else:
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(model_dir)
        from ami.neuron.chat import ChatFormat

        chat = ChatFormat.for_tokenizer(tok, [tok.eos_token_id])
        ids = chat.render([{"role": "user", "content": "Hello"}], None)
        out["tokenizer"] = {"turn_id": tok.convert_tokens_to_ids("<|turn>"), "first_ids": ids[:3],
                            "decoded": tok.decode(ids)}
    except Exception as e:  # noqa: BLE001
        out["tokenizer_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


if __name__ == "__main__":
    if sys.argv[1] == "imports":
        result = imports()
    elif sys.argv[1] == "all":
        result = {"imports": imports(), "compat": construct(sys.argv[2], True), "without": construct(sys.argv[2], False)}
    else:
        result = construct(sys.argv[2], "--without-compat" not in sys.argv)
    print(json.dumps(result, default=str))
