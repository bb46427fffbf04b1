"""Per-row batch pieces shared by the CPU and Neuron runners: padding, sampling, stopping.

Each request in a batch keeps its own temperature, top-p, stop tokens and token budget; the
model only ever sees one padded batch. Imports torch, so only runners import this module.
"""
from __future__ import annotations

import torch

from .scheduler import Row


def pad_batch(rows: list[Row], pad_id: int, side: str, batch_size: int | None = None,
              filler_id: int | None = None):
    """(input_ids, attention_mask, n_real) padded to the longest prompt, and with filler rows up
    to ``batch_size`` when the compiled model only takes full batches. Filler rows hold one real
    token (an all-padding row would give attention nothing to attend to) and are never emitted."""
    prompts = [r.prompt_ids for r in rows]
    n_real = len(prompts)
    if batch_size is not None:
        if n_real > batch_size:
            raise ValueError(f"{n_real} rows for a batch of {batch_size}")
        prompts += [[pad_id if filler_id is None else filler_id]] * (batch_size - n_real)
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        span = slice(width - len(p), width) if side == "left" else slice(0, len(p))
        ids[i, span] = torch.tensor(p, dtype=torch.long)
        mask[i, span] = 1
    return ids, mask, n_real


class RowSampler:
    """Logits processor: per-row temperature and top-p; temperature 0 means greedy (every
    logit but the largest masked). Works as a transformers LogitsProcessor (called with
    input_ids, scores) and on its own; ``sample`` then draws one token per row."""

    def __init__(self, rows: list[Row], n_total: int) -> None:
        temps = [r.temperature for r in rows] + [0.0] * (n_total - len(rows))
        top_p = [r.top_p for r in rows] + [1.0] * (n_total - len(rows))
        self.temps = torch.tensor(temps, dtype=torch.float32)
        self.top_p = torch.tensor(top_p, dtype=torch.float32)

    def __call__(self, input_ids, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        greedy = self.temps <= 0
        scores = scores / torch.where(greedy, torch.ones_like(self.temps), self.temps)[:, None]
        if bool((self.top_p < 1).any()):
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            cum = sorted_scores.softmax(-1).cumsum(-1)
            drop = (cum - sorted_scores.softmax(-1)) > self.top_p[:, None]  # keep the first above p
            sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
            scores = torch.full_like(scores, float("-inf")).scatter(1, order, sorted_scores)
        if bool(greedy.any()):
            best = scores.argmax(-1, keepdim=True)
            only_best = torch.full_like(scores, float("-inf")).scatter(1, best, 0.0)
            scores = torch.where(greedy[:, None], only_best, scores)
        return scores

    @staticmethod
    def sample(scores: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(scores.softmax(-1), 1).squeeze(1)


class RowTracker:
    """Called once per decoding step with the ids so far (a transformers StoppingCriteria, or
    directly): emits each live row's new token and returns which rows are done."""

    def __init__(self, rows: list[Row], n_total: int) -> None:
        self.rows = rows
        self.counts = [0] * len(rows)
        self.done = torch.tensor([False] * len(rows) + [True] * (n_total - len(rows)))

    def __call__(self, input_ids: torch.Tensor, scores=None, **kwargs) -> torch.Tensor:
        new = input_ids[:, -1].tolist()
        for i, row in enumerate(self.rows):
            if self.done[i]:
                continue
            if row.cancelled:
                self.done[i] = True
                continue
            token = new[i]
            row.emit(token)
            self.counts[i] += 1
            if token in row.stop_ids or self.counts[i] >= row.max_new:
                self.done[i] = True
        return self.done.clone()

    @property
    def all_done(self) -> bool:
        return bool(self.done.all())
