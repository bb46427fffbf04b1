"""Per-row sampling for a batch of rows: each request keeps its own temperature and top-p while
the model decodes them together. Imports torch, so only the engine thread imports this module.
"""
from __future__ import annotations

import torch


class RowSampler:
    """Logits processor: per-row temperature and top-p; temperature 0 means greedy (every
    logit but the largest masked). Works as a transformers LogitsProcessor (called with
    input_ids, scores) and on its own; ``sample`` then draws one token per row."""

    def __init__(self, rows: list, n_total: int) -> None:  # scheduler.Row (not imported: no cycle)
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
