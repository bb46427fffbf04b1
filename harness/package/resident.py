"""What vLLM holds on the GPU after loading a package: its "Model loading took X GiB memory".

The public figures (6.33 / 3.19 / 2.86 GiB for text / ple4 / emb4, xbill9/sagemaker-gemma, vLLM
0.30.0 on an L4) are ``torch.cuda.memory_allocated()`` after the load, not file sizes. This module
replays the load of a package as vLLM 0.30.0 does it for ``Gemma4ForCausalLM`` (the architecture
a package declares, layout.text_config) and counts the blocks that stay allocated
(harness.package.allocator). Source read: the vllm 0.30.0 wheel from PyPI
(vllm-0.30.0-cp38-abi3-manylinux_2_28_x86_64.whl, sha256 ef52ee58c410..., ``_version.py`` commit
gced6857af). Besides the package's tensors, the load leaves:

- rotary cos/sin caches, one per distinct ``get_rope`` key (``rotary_embedding/__init__.py``
  ``_ROPE_DICT``), each ``[max_position_embeddings, rotary_dim]`` in the model dtype
  (``rotary_embedding/base.py`` ``RotaryEmbeddingBase.__init__``: computed in fp32, then
  ``cache.to(dtype)``; flashinfer is off). Gemma 4's "proportional" rope
  (``gemma4_rope.py`` ``Gemma4RotaryEmbedding``) passes ``head_size`` as the cache's rotary_dim
  and zero-pads the unrotated angles, so its cache is full width whatever partial_rotary_factor;
- blocks the caching allocator cannot split: vLLM loads under ``max_split_size_mb:20``
  (``v1/worker/gpu_worker.py`` ``Worker.load_model``, ``_scoped_allocator_max_split(20)``), and
  Marlin's repack (``kernels/linear/mixed_precision/marlin.py``
  ``MarlinLinearKernel.process_weights_after_loading``) frees and re-allocates every int4
  weight and scale, leaving 1-10 MiB tensors in free blocks with at most 1 MiB to spare;
- small runtime tensors: a Marlin workspace per quantized linear (``marlin_utils.py``
  ``marlin_make_workspace_new``: one int32 per SM), four fp32 kv-scale scalars per attention
  layer (``layers/attention/attention.py`` ``set_default_quant_scales``), the weightless
  ``v_norm``'s ones (``layers/layernorm.py`` ``RMSNorm``) and 0-d buffers (``models/gemma4.py``).

Not in the figure, and not modelled: Gemma4ForConditionalGeneration's per-layer-embedding
buffer (``gemma4_mm.py``, only in the multimodal wrapper) and Gemma4Model's fast-prefill buffers
(only with ``--kv-sharing-fast-prefill``). Assumed: the large pool holds no free block when the
load starts (``DeviceMemoryProfiler`` empties the cache first, and the V2 runner's buffers made
before it are small or UVA-backed: ``v1/worker/gpu/states.py``, ``input_batch.py``); weights load
from host memory into their parameters without device temporaries (``weight_utils.py``
``safetensors_weights_iterator``).
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.package.allocator import CachingAllocator, round_size
from kit.schemes import GROUP_SIZE, Scheme

MAX_SPLIT_SIZE = 20 << 20  # vLLM 0.30.0 gpu_worker.py: max_split_size_mb=20 around load_model
L4_SMS = 58  # NVIDIA L4: 7,424 CUDA cores, 128 per Ada SM (NVIDIA L4 datasheet)


@dataclass(frozen=True)
class Serving:
    dtype_bytes: int = 2  # bf16 (fp16 on a T4): the rope caches and norms
    sms: int = L4_SMS  # Marlin workspace: one int32 per SM
    max_split_size: int | None = MAX_SPLIT_SIZE  # None: PyTorch's default, no limit


def rope_caches(text: dict, dtype_bytes: int = 2) -> dict[str, int]:
    """Bytes of each rotary cos/sin cache vLLM keeps, keyed by layer type (one per get_rope key)."""
    caches: dict[tuple, tuple[str, int]] = {}
    for t in text["layer_types"]:
        head = text["global_head_dim"] if t == "full_attention" else text["head_dim"]
        params = text["rope_parameters"][t]
        if params.get("rope_type", "default") == "proportional":
            dim = head  # Gemma4RotaryEmbedding: rotary_dim = head_size (full application)
        else:
            dim = int(head * params.get("partial_rotary_factor", 1.0))
        key = (head, dim, tuple(sorted(params.items())))
        caches.setdefault(key, (t, text["max_position_embeddings"] * dim * dtype_bytes))
    return dict(caches.values())


class _Load:
    """Allocation events of one load, tallied by kind: weight | rope | runtime | temp."""

    def __init__(self, serving: Serving):
        self.a = CachingAllocator(serving.max_split_size)
        self.live: dict[str, tuple] = {}
        self.n = 0

    def alloc(self, kind: str, nbytes: int, name: str | None = None) -> str:
        if name is None:
            self.n += 1
            name = f"_{self.n}"
        self.live[name] = (kind, nbytes, self.a.malloc(nbytes))
        return name

    def free(self, name: str) -> None:
        self.a.free(self.live.pop(name)[2])

    def tally(self) -> dict[str, int]:
        out = {"weight": 0, "rope": 0, "runtime": 0, "rounding": 0}
        for kind, nbytes, _ in self.live.values():
            out[kind] += nbytes
            out["rounding"] += round_size(nbytes) - nbytes if nbytes else 0
        out["unsplit"] = self.a.allocated - sum(out.values())
        out["total"] = self.a.allocated
        return out


def _packed(fmt: str, k: int, n: int) -> tuple[int, int]:
    """(packed weight bytes, scale bytes) of an [n, k] tensor: compressed_tensors_wNa16.py
    create_weights (int32-packed values, one model-dtype scale per group or per row)."""
    if fmt == "int4":
        return n * k // 2, n * (k // GROUP_SIZE["int4"]) * 2
    if fmt == "int8":
        return n * k, n * 2
    raise ValueError(f"no packed layout for format {fmt!r}")


def _rope(load: _Load, text: dict, layer_type: str, dtype_bytes: int, done: set) -> None:
    """base.py _compute_cos_sin_cache: fp32 freqs, cos, sin, their concatenation; then .to(dtype)."""
    if layer_type in done:
        return
    done.add(layer_type)
    nbytes = rope_caches(text, dtype_bytes)[layer_type]
    rows, dim = text["max_position_embeddings"], nbytes // (text["max_position_embeddings"] * dtype_bytes)
    temps = [load.alloc("temp", rows * dim // 2 * 4) for _ in range(3)]
    cat = load.alloc("temp", rows * dim * 4)
    for t in temps:
        load.free(t)
    load.alloc("rope", nbytes)
    load.free(cat)


def load(config: dict, s: Scheme, serving: Serving = Serving()) -> dict[str, int]:
    """Bytes vLLM holds after loading ``s``'s package of ``config``, by kind; "total" is the figure."""
    text = dict(config.get("text_config", config))
    d = serving.dtype_bytes
    h, layers, ple = text["hidden_size"], text["num_hidden_layers"], text["hidden_size_per_layer_input"]
    vocab, ple_vocab = text["vocab_size"], text.get("vocab_size_per_layer_input", text["vocab_size"])
    heads, kv_heads = text["num_attention_heads"], text["num_key_value_heads"]
    first_shared = layers - text.get("num_kv_shared_layers", 0)
    ld, marlin, ropes = _Load(serving), [], set()

    def linear(name: str, k: int, n: int) -> None:  # every Linear is packed (schemes.format_of)
        w, sc = _packed(s.linear, k, n)
        ld.alloc("weight", w, name + ".w"), ld.alloc("weight", sc, name + ".s"), ld.alloc("weight", 16)
        marlin.append((name, s.linear, k, n))

    def embedding(name: str, rows: int, cols: int, fmt: str) -> None:
        if fmt == "bf16":
            ld.alloc("weight", rows * cols * d)
        else:
            w, sc = _packed(fmt, cols, rows)
            ld.alloc("weight", w), ld.alloc("weight", sc), ld.alloc("weight", 16)

    # Gemma4ForCausalLM.__init__ -> Gemma4Model.__init__, in construction order (models/gemma4.py)
    embedding("embed_tokens", vocab, h, s.token_embeddings)
    embedding("embed_tokens_per_layer", ple_vocab, layers * ple, s.per_layer_embeddings)
    ld.alloc("runtime", d)  # embed_scale_per_layer
    linear("per_layer_model_projection", h, layers * ple)
    ld.alloc("weight", ple * d)  # per_layer_projection_norm
    ld.alloc("runtime", d), ld.alloc("runtime", d)  # per_layer_input_scale, per_layer_projection_scale
    for i, layer_type in enumerate(text["layer_types"]):
        hd = text["global_head_dim"] if layer_type == "full_attention" else text["head_dim"]
        if i >= first_shared:  # Gemma4Attention: KV-shared layers only have q_proj
            linear(f"{i}.q_proj", h, heads * hd)
        else:
            linear(f"{i}.qkv_proj", h, (heads + 2 * kv_heads) * hd)
            ld.alloc("weight", hd * d), ld.alloc("runtime", hd * d)  # k_norm, v_norm's ones
        linear(f"{i}.o_proj", heads * hd, h)
        ld.alloc("weight", hd * d)  # q_norm
        _rope(ld, text, layer_type, d, ropes)
        for _ in range(4):
            ld.alloc("runtime", 4)  # Attention: _k_scale, _v_scale, _q_scale, _prob_scale (fp32)
        wide = 2 if i >= first_shared and text.get("use_double_wide_mlp") else 1
        inter = text["intermediate_size"] * wide
        linear(f"{i}.gate_up_proj", h, 2 * inter)
        linear(f"{i}.down_proj", inter, h)
        for _ in range(4):
            ld.alloc("weight", h * d)  # input/post_attention/pre_ff/post_ff layernorms
        linear(f"{i}.per_layer_input_gate", h, ple)
        linear(f"{i}.per_layer_projection", ple, h)
        ld.alloc("weight", h * d), ld.alloc("weight", d)  # post_per_layer_input_norm, layer_scalar
    ld.alloc("weight", h * d), ld.alloc("runtime", d)  # norm, normalizer
    if s.untied_lm_head:
        linear("lm_head", h, vocab)
    else:  # ParallelLMHead allocates its own weight, then tie_weights drops it for embed_tokens'
        ld.free(ld.alloc("temp", vocab * h * d))
    # process_weights_after_loading, in named_modules order: Marlin repacks each packed Linear
    for name, fmt, k, n in marlin:
        ld.alloc("runtime", serving.sms * 4)  # workspace
        for part in (".w", ".s"):  # x.data.contiguous() of the permuted view, the repacked output
            nbytes = ld.live[name + part][1]
            tmp = ld.alloc("temp", nbytes)
            out = ld.alloc("weight", nbytes)
            ld.free(tmp)
            ld.free(name + part)
            ld.live[name + part] = ld.live.pop(out)
    return ld.tally()
