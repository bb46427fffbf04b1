"""A ``SlotRunner`` without a model, for scheduler and server tests: each row's next token is
``next_token(tokens so far in its slot)``, given as logits with all the mass on it, and every
call (prefill into which slot, decode over which slots) is recorded."""
from __future__ import annotations

import threading
import time

import torch


class FakeSlotRunner:
    prompt_logits = True

    def __init__(self, slots: int = 4, vocab: int = 512, next_token=None, step_s: float = 0.0,
                 gate: threading.Event | None = None, fail_decode: int = 0) -> None:
        self.slots, self.vocab, self.step_s, self.gate = slots, vocab, step_s, gate
        self.next_token = next_token or (lambda seq: 40)
        self.history: dict[int, list[int]] = {}
        self.calls: list[tuple] = []
        self.fail_decode = fail_decode  # this many decode calls raise, first
        self.started, self.released = threading.Event(), threading.Event()
        self.releases: list[int] = []

    def _logits(self, seqs) -> torch.Tensor:
        out = torch.full((len(seqs), self.vocab), -1e4)
        for i, seq in enumerate(seqs):
            out[i, self.next_token(seq) % self.vocab] = 0.0
        return out

    def prefill(self, slot, prompt_ids, all_logits=False):
        assert slot not in self.history, f"slot {slot} prefilled while busy"
        self.calls.append(("prefill", slot, len(prompt_ids)))
        self.history[slot] = list(prompt_ids)
        if all_logits:
            return self._logits([prompt_ids[:k + 1] for k in range(len(prompt_ids))])
        return self._logits([prompt_ids])

    def decode(self, slots, tokens):
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        self.calls.append(("decode", tuple(slots)))
        if self.fail_decode:
            self.fail_decode -= 1
            raise MemoryError("device out of memory")
        if self.step_s:
            time.sleep(self.step_s)
        for s, t in zip(slots, tokens):
            self.history[s].append(t)
        return self._logits([self.history[s] for s in slots])

    def release(self, slot):
        self.history.pop(slot, None)
        self.releases.append(slot)
        self.released.set()
