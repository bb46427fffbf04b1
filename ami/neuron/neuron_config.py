"""How the model is compiled for Neuron: shapes, tensor parallelism, dtype, embedding split,
compiled-artifact cache path. Pure functions over plain data (no Neuron SDK import), so every
rule here is unit-tested on a machine without a NeuronCore.

Facts behind the rules (see README, "Why these shapes"):
- Neuron graphs are compiled ahead of time for fixed shapes: a request longer than the largest
  prompt bucket or the total sequence length cannot run, it must be refused.
- Tensor parallelism: which degrees the Neuron runtime supports on an instance, and the
  instance's Neuron platform, are catalog facts (kit/catalog.py ``neuron_tp_degrees``,
  ``neuron_platform``). The stack decides them, userdata/engine-neuron.sh hands them over as
  ``--tp-degrees`` and ``--platform``, and this module only picks the largest of those degrees
  that fits the NeuronCores it sees and divides the model's attention heads (known once the
  checkpoint is on disk). The engine ships without the harness, so it never imports the catalog.
- A single embedding gather above ~4-5 GB returned zeros without an error in the seed's port;
  Gemma 4 E2B's per-layer embedding table is 262144 x 8960 (4.70 GB in bf16), so it is split
  across NeuronCores (NxD's ParallelEmbedding shards it along the embedding dimension) and we
  refuse any layout that leaves one shard above the limit.
- int4 weights are widened to bf16 before every matmul on NeuronCore-v2 (27x slower per call
  than bf16 in the seed): an int4 checkpoint is refused, bf16 is the default.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Sequence

DTYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2)}
REFUSED_DTYPES = {
    "int4": "int4 weights are widened to bf16 before every matmul on NeuronCore-v2 "
            "(27x slower per call than bf16); serve the bf16 checkpoint with --dtype bf16",
    "int8": "this engine compiles 16-bit weights only; use --dtype bf16",
    "fp8": "NeuronCore-v2 has fp8 in hardware but the compiler does not use it yet; use --dtype bf16",
}
MAX_GATHER_BYTES = 4 * 10**9  # stay under the ~4-5 GB where the seed saw silent zeros
HBM_PER_CORE_BYTES = 16 * 2**30  # inf2 and trn1: 16 GiB of device memory per NeuronCore
HBM_USABLE = 0.85  # leave room for the runtime, scratchpad and activations
DEFAULT_CACHE_ROOT = "/var/cache/ami-neuron"
# Logical NeuronCore config 1 ("LNC=2 is a Trainium2-only feature", the Gemma 4 31B port's inf2
# notes); NxD Inference 0.8 reads it from NEURON_LOGICAL_NC_CONFIG first, then this kwarg
# (models/config.py _get_lnc at cd3abf3). The launcher exports the variable too.
LNC1_PLATFORMS = ("inf2", "trn1")
# How the graphs are compiled to batch: continuous (context encoding of one sequence into one KV
# line, token generation over the batch; see nxdi_slots.py). Part of the cache key: artifacts
# compiled for the older static waves (context encoding of the whole batch) cannot serve it.
BATCHING = "continuous"
# Sampling on the NeuronCore (NxD Inference 0.8 OnDeviceSamplingConfig, models/config.py l.1023 at
# cd3abf3): ``dynamic`` takes each row's [top_k, top_p, temperature] from the call's
# sampling_params (modules/generation/sampling.py Sampler._multinomial_sample); the candidates are
# the ``global_topk`` best (nxd_topk across ranks), so a row's top_k is 1..GLOBAL_TOPK (0 or -1 would
# mean a uniform draw over the vocabulary: validate_sampling_params' warning) and "no top-k" is
# GLOBAL_TOPK. ``output_logits`` returns the gathered logits beside the tokens (model_base.py
# forward, ``outputs += [logits]``) for the rows the host must sample: log-probabilities, seeds,
# penalties, logit bias, structured output. Part of the compiled-cache key.
GLOBAL_TOPK = 256  # NxD Inference's default (OnDeviceSamplingConfig.global_topk)
SAMPLING = {"do_sample": True, "dynamic": True, "global_topk": GLOBAL_TOPK, "deterministic": False}


class ConfigError(ValueError):
    """A configuration the engine refuses; the message is one line naming the value."""


@dataclass(frozen=True)
class Shapes:
    prompt_buckets: tuple[int, ...]  # context-encoding graphs (prompt lengths, padded up)
    total_tokens: int  # prompt + generated, per sequence (NxDI seq_len)
    batch_size: int
    token_buckets: tuple[int, ...]  # token-generation graphs (KV length, padded up)

    @property
    def max_prompt_tokens(self) -> int:
        return self.prompt_buckets[-1]


def make_shapes(prompt_buckets, total_tokens: int, batch_size: int, token_buckets=None) -> Shapes:
    pb = tuple(int(b) for b in prompt_buckets)
    if not pb or any(b < 1 for b in pb) or list(pb) != sorted(set(pb)):
        raise ConfigError(f"prompt buckets must be increasing positive integers, got {list(pb)}")
    if total_tokens <= pb[-1]:
        raise ConfigError(f"total tokens ({total_tokens}) must exceed the largest prompt bucket "
                          f"({pb[-1]}) to leave room for generated tokens")
    if not 1 <= batch_size <= 64:
        raise ConfigError(f"batch size must be in 1..64, got {batch_size}")
    if token_buckets is None:
        # Doubling KV lengths ending at the total. With the E2B port they save no attention work:
        # its per-layer cache shapes make NxD Inference read every layer's full length whatever
        # the bucket (kv_cache_manager.py l.332-333 at cd3abf3; kv_cache_bytes below).
        tb, b = [total_tokens], total_tokens
        while b // 2 >= max(pb[0], 256) and len(tb) < 3:
            b //= 2
            tb.insert(0, b)
    else:
        tb = [int(b) for b in token_buckets]
    if not tb or tb != sorted(set(tb)) or tb[-1] != total_tokens or tb[0] < 1:
        raise ConfigError(f"token buckets must be increasing and end at the total ({total_tokens}), got {tb}")
    return Shapes(pb, total_tokens, batch_size, tuple(tb))


# What the Neuron image serves unless told otherwise (README, "Shapes served by default"): room
# for the agent trial's tool-declaring prompts and the 2048-in/512-out benchmark profile.
DEFAULT_SHAPES = make_shapes((128, 512, 2048), 4096, 4)


@dataclass(frozen=True)
class EmbeddingTable:
    name: str
    rows: int
    cols: int
    bytes: int


def text_config(model_config: dict) -> dict:
    """Gemma 4 checkpoints nest the language model's settings under ``text_config``."""
    return model_config.get("text_config") or model_config


def embedding_tables(model_config: dict, dtype_bytes: int) -> list[EmbeddingTable]:
    tc = text_config(model_config)
    tables = [EmbeddingTable("embed_tokens", tc["vocab_size"], tc["hidden_size"],
                             tc["vocab_size"] * tc["hidden_size"] * dtype_bytes)]
    if tc.get("hidden_size_per_layer_input"):
        rows = tc.get("vocab_size_per_layer_input") or tc["vocab_size"]
        cols = tc["num_hidden_layers"] * tc["hidden_size_per_layer_input"]
        tables.append(EmbeddingTable("embed_tokens_per_layer", rows, cols, rows * cols * dtype_bytes))
    return tables


def kv_cache_bytes(model_config: dict, shapes: Shapes, dtype_bytes: int) -> int:
    """The KV cache on one NeuronCore as the Gemma 4 E2B port allocates it (neuronx-distributed-
    inference 6aa6121, contrib/models/gemma-4-E2B/src/modeling_gemma4_e2b.py):
    - every layer has its own K and V, the KV-shared ones too ("All 35 layers have independent
      cache slots", Gemma4E2BKVCacheManager docstring l.1076);
    - each at its layer's head dim: ``head_dim`` for sliding layers, ``global_head_dim`` for full
      ones (layer_kv_configs, l.1612-1628);
    - all at one length, max(sliding_window, max_length) (init_model, l.1269-1277: "All layers use
      a uniform cache size"), for the whole batch (``kv_cache_batch_size`` = batch_size, NxD
      Inference cd3abf3 models/config.py l.167);
    - KV heads replicated up to the tp degree when there are fewer (E2B has one: one per core,
      get_shardable_head_counts, l.1624-1627), so the cache is not divided across cores.
    Gemma 4 E2B, 4096 tokens, batch 4, bf16: (28 x 256 + 7 x 512) x 2 x 4096 x 4 x 2 = 0.70 GB."""
    tc = text_config(model_config)
    layers = tc["num_hidden_layers"]
    sliding = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    full = tc.get("global_head_dim") or sliding
    width = {"full_attention": full, "sliding_attention": sliding}
    kinds = tc.get("layer_types") or [None] * layers  # a layer of unknown kind: the wider head
    heads = sum(width.get(k, max(full, sliding)) for k in kinds[:layers])
    kv_heads = tc.get("num_key_value_heads") or tc["num_attention_heads"]
    length = max(tc.get("sliding_window") or 0, shapes.total_tokens)
    return 2 * kv_heads * heads * length * shapes.batch_size * dtype_bytes


def check_memory(weight_bytes: int, kv_bytes: int, tp_degree: int,
                 hbm_per_core: int = HBM_PER_CORE_BYTES) -> int:
    """Weights split over the tp ranks plus a full KV cache must fit one NeuronCore's memory;
    refusing here beats an out-of-memory after a long compile. Returns bytes per core."""
    per_core = math.ceil(weight_bytes / tp_degree) + kv_bytes
    if per_core > hbm_per_core * HBM_USABLE:
        raise ConfigError(
            f"{weight_bytes / 1e9:.1f} GB of weights over tp degree {tp_degree} plus a "
            f"{kv_bytes / 1e9:.2f} GB KV cache needs {per_core / 2**30:.1f} GiB per NeuronCore, over "
            f"the {hbm_per_core * HBM_USABLE / 2**30:.1f} GiB usable; raise the tp degree or lower "
            f"--batch-size / --max-total-tokens")
    return per_core


def check_precision(model_config: dict, dtype: str) -> None:
    if dtype in REFUSED_DTYPES:
        raise ConfigError(f"--dtype {dtype} refused: {REFUSED_DTYPES[dtype]}")
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    q = model_config.get("quantization_config") or text_config(model_config).get("quantization_config")
    if q:
        bits = json.dumps(q)
        if '"num_bits": 4' in bits or "int4" in bits or "w4a16" in bits:
            raise ConfigError(f"int4 checkpoint refused: {REFUSED_DTYPES['int4']}")
        raise ConfigError(f"quantized checkpoint ({q.get('quant_method', 'unknown method')}) refused: "
                          "this engine compiles bf16/fp16 weights; point --model at the bf16 checkpoint")


def choose_tp_degree(neuron_cores: int, tp_degrees: Sequence[int], num_attention_heads: int) -> int:
    """Largest of ``tp_degrees`` (those the runtime supports on this instance, from the catalog)
    that fits the NeuronCores and divides the attention heads."""
    if neuron_cores < 1:
        raise ConfigError(f"no NeuronCores found (count {neuron_cores}); is the Neuron driver loaded?")
    if not tp_degrees:
        raise ConfigError("no tensor-parallel degree: pass --tp-degree N, or --tp-degrees N,N,.. (the degrees "
                          "the Neuron runtime supports on this instance; kit/catalog.py lists them)")
    fits = [d for d in tp_degrees if d <= neuron_cores and num_attention_heads % d == 0]
    if not fits:
        raise ConfigError(f"none of the tp degrees {list(tp_degrees)} fits the {neuron_cores} NeuronCores "
                          f"and divides the model's {num_attention_heads} attention heads")
    return max(fits)


def check_tp_degree(tp: int, neuron_cores: int, tp_degrees: Sequence[int], num_attention_heads: int) -> None:
    if tp_degrees and tp not in tp_degrees:
        raise ConfigError(f"--tp-degree {tp} is not one the Neuron runtime supports on this instance; "
                          f"valid: {list(tp_degrees)}")
    if tp > neuron_cores:
        raise ConfigError(f"--tp-degree {tp} exceeds the {neuron_cores} NeuronCores of this instance")
    if num_attention_heads % tp:
        raise ConfigError(f"--tp-degree {tp} does not divide the model's {num_attention_heads} attention heads")


@dataclass(frozen=True)
class NeuronEngineConfig:
    shapes: Shapes
    tp_degree: int
    dtype: str  # bf16 | fp16
    embedding_shards: int  # pieces the largest embedding table is split into (one per rank)
    largest_gather_bytes: int  # biggest single embedding gather per NeuronCore after the split
    compiled_dir: str  # compiled artifacts (NEFFs, sharded weights), reused across restarts
    cache_key: str
    bytes_per_core: int | None = None  # weights share + KV cache, when the weights' size is known
    platform: str | None = None  # the catalog's Neuron platform (inf2, trn1, ...), when given

    @property
    def torch_dtype(self) -> str:
        return DTYPES[self.dtype][0]

    def neuron_config_kwargs(self) -> dict:
        """Keyword arguments for NxD Inference's ``NeuronConfig`` (torch_dtype added by the
        caller as a torch dtype, since this module does not import torch)."""
        s = self.shapes
        return {
            "tp_degree": self.tp_degree,
            "batch_size": s.batch_size,
            "max_batch_size": s.batch_size,
            # Continuous batching as vLLM's Neuron integration configures it (ctx_batch_size=1,
            # is_continuous_batching=True: vllm-project/vllm neuronx_distributed.py
            # _get_default_neuron_config); NxDI 0.8 models/config.py lines 161-164 read these keys.
            "is_continuous_batching": True,
            "ctx_batch_size": 1,
            "tkg_batch_size": s.batch_size,
            "seq_len": s.total_tokens,
            "max_context_length": s.max_prompt_tokens,
            "max_length": s.total_tokens,
            "enable_bucketing": True,
            "context_encoding_buckets": list(s.prompt_buckets),
            "token_generation_buckets": list(s.token_buckets),
            "padding_side": "right",
            "on_device_sampling_config": dict(SAMPLING),
            "output_logits": True,
            "save_sharded_checkpoint": True,  # sharded weights live in the cache: fast restarts
            # The settings of the one Gemma 4 run upstream validated on inf2 (SDK 2.28, the 31B
            # port; kit/neuron_facts.py INF2_SETTINGS): NxDI's attention kernel off (head dims
            # 256/512 exceed its 128; the decomposed attention path), no fused QKV (Q/K/V shapes
            # differ per layer type), and below, one physical NeuronCore per logical core.
            "attn_kernel_enabled": False,
            "fused_qkv": False,
            **({"logical_nc_config": 1} if self.platform in LNC1_PLATFORMS else {}),
        }

    def marker(self) -> dict:
        return {"cache_key": self.cache_key, "tp_degree": self.tp_degree, "dtype": self.dtype,
                "shapes": asdict(self.shapes)}


def cache_key(model_config: dict, shapes: Shapes, tp_degree: int, dtype: str, sdk_version: str,
              platform: str | None = None, revision: str | None = None) -> str:
    """Everything compiled into the artifacts: change any of it and the engine recompiles. The
    checkpoint's commit is in it because the compiled folder also holds the sharded weights
    (save_sharded_checkpoint), which a later load reads instead of the checkpoint: a pinned commit
    with the same config.json must not reuse another commit's weights."""
    blob = json.dumps({"model": model_config, "revision": revision, "shapes": asdict(shapes), "tp": tp_degree,
                       "dtype": dtype, "sdk": sdk_version, "platform": platform,
                       "batching": BATCHING, "sampling": {**SAMPLING, "output_logits": True}},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def plan(model_config: dict, *, neuron_cores: int, tp_degrees: Sequence[int] = (), platform: str | None = None,
         shapes: Shapes = DEFAULT_SHAPES, dtype: str = "bf16", tp_degree: int | None = None, cache_root: str = DEFAULT_CACHE_ROOT,
         sdk_version: str = "unknown", max_gather_bytes: int = MAX_GATHER_BYTES,
         model_name: str = "model", weight_bytes: int | None = None,
         revision: str | None = None) -> NeuronEngineConfig:
    """The whole compile configuration from the checkpoint's config.json and the instance.
    ``tp_degrees`` and ``platform`` are the catalog's, as the stack passed them; ``tp_degree``
    forces one degree (checked against ``tp_degrees`` when given)."""
    check_precision(model_config, dtype)
    heads = text_config(model_config)["num_attention_heads"]
    if tp_degree is None:
        tp_degree = choose_tp_degree(neuron_cores, tp_degrees, heads)
    else:
        check_tp_degree(tp_degree, neuron_cores, tp_degrees, heads)
    largest = max(embedding_tables(model_config, DTYPES[dtype][1]), key=lambda t: t.bytes)
    per_rank = math.ceil(largest.bytes / tp_degree)
    if per_rank > max_gather_bytes:
        need = math.ceil(largest.bytes / max_gather_bytes)
        raise ConfigError(
            f"tp degree {tp_degree} leaves {largest.name} at {per_rank / 1e9:.2f} GB per NeuronCore, "
            f"above the {max_gather_bytes / 1e9:.2f} GB single-gather limit (silent zeros); "
            f"use a tp degree of at least {need}")
    per_core = None
    if weight_bytes is not None:
        per_core = check_memory(weight_bytes, kv_cache_bytes(model_config, shapes, DTYPES[dtype][1]),
                                tp_degree)
    key = cache_key(model_config, shapes, tp_degree, dtype, sdk_version, platform, revision)
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name) or "model"
    return NeuronEngineConfig(shapes, tp_degree, dtype, tp_degree, per_rank,
                              f"{cache_root.rstrip('/')}/{safe_name}-{key}", key, per_core, platform)


def parse_neuron_ls(text: str) -> int:
    """NeuronCore count from ``neuron-ls --json-output`` (a list of devices with nc_count)."""
    try:
        devices = json.loads(text)
        return sum(int(d["nc_count"]) for d in devices)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"cannot read NeuronCore count from neuron-ls output: {exc}") from None

