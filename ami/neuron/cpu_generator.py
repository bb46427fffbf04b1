"""CPU generator: the same server over a transformers model, so every code path above the
compiled model runs on a laptop and in CI. Not a production path (no compile, no bf16 kernels).
"""
from __future__ import annotations

import os

import torch

from .chat import ChatFormat
from .cpu_slots import HFSlotRunner
from .generator import BatchedGenerator, Limits

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def default_threads(cores: int | None = None) -> int:
    """Half the cores, at most 4: the other half serves the event loop (HTTP, SSE, detokenizing)
    and whatever sends the requests. On 2 shared cores, 2 OpenMP workers fought the client and the
    same 4-stream level measured 64 tok/s in one run and 869 in the next (decode step p50 52 ms
    vs 3 ms); 1 thread was steady."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(4, cores // 2))


def load(model_dir: str | None, tiny_random: bool, threads: int, dtype: str = "bf16"):
    """(model, tokenizer) from a checkpoint directory (in ``dtype``), or the tiny random model
    (float32: it is small, and fp32 keeps greedy results stable across batch shapes)."""
    torch.set_num_threads(threads)
    if tiny_random:
        from . import tiny
        return tiny.build()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype]).eval()
    return model, tokenizer


def make_generator(model_id: str, model_dir: str | None, tiny_random: bool, limits: Limits,
                   batch_wait_s: float, threads: int | None = None, dtype: str = "bf16",
                   max_queue: int = 64) -> BatchedGenerator:
    model, tokenizer = load(model_dir, tiny_random, threads or default_threads(), dtype)
    eos = getattr(model.generation_config, "eos_token_id", None)
    chat = ChatFormat.for_tokenizer(tokenizer, eos if isinstance(eos, list) else [eos])
    return BatchedGenerator(model_id, chat, limits, HFSlotRunner(model, limits.max_batch_size),
                            batch_wait_s, max_queue)
