"""CPU generator: the same server over a transformers model, so every code path above the
compiled model runs on a laptop and in CI. Not a production path (no compile, no bf16 kernels).
"""
from __future__ import annotations

import os

import torch

from .batch_ops import RowSampler, RowTracker, pad_batch
from .chat import ChatFormat
from .generator import BatchedGenerator, Limits
from .scheduler import Row


class HFRunner:
    """Runs a batch through ``model.generate``: left padding, our per-row sampler as the logits
    processor, our per-row tracker as the stopping criterion (it also streams the tokens)."""

    def __init__(self, model, pad_id: int) -> None:
        self.model, self.pad_id = model, pad_id

    def run(self, rows: list[Row]) -> None:
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        ids, mask, n_real = pad_batch(rows, self.pad_id, "left")
        tracker = RowTracker(rows, ids.shape[0])
        config = GenerationConfig(do_sample=True, max_new_tokens=max(r.max_new for r in rows),
                                  temperature=1.0, top_k=0, top_p=1.0, pad_token_id=self.pad_id,
                                  eos_token_id=None)
        with torch.inference_mode():
            self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                logits_processor=LogitsProcessorList([RowSampler(rows, ids.shape[0])]),
                                stopping_criteria=StoppingCriteriaList([tracker]))


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


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
                   batch_wait_s: float, threads: int | None = None, dtype: str = "bf16") -> BatchedGenerator:
    model, tokenizer = load(model_dir, tiny_random, threads or min(4, os.cpu_count() or 1), dtype)
    eos = getattr(model.generation_config, "eos_token_id", None)
    chat = ChatFormat.for_tokenizer(tokenizer, eos if isinstance(eos, list) else [eos])
    # Stopping is per request (ignore_eos, stop tokens) in RowTracker; generate() must not stop
    # the whole batch on the checkpoint's default end-of-sequence ids.
    model.generation_config.eos_token_id = None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return BatchedGenerator(model_id, chat, limits, HFRunner(model, pad), batch_wait_s)
