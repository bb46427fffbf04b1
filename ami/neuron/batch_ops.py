"""Per-row sampling for a batch of rows: each request keeps its own sampling settings while the
model decodes them together. Imports torch, so only the engine thread imports this module.

The order is vLLM's (``vllm/v1/sample/sampler.py`` ``Sampler.forward``): the model's own
log-probabilities are taken from the raw logits first (its default ``raw_logprobs`` mode, what a
client's ``logprobs`` report), then allowed tokens (structured output), logit bias, penalties,
and sampling with temperature, top-k and top-p. Penalties as vLLM applies them
(``apply_penalties``, ``vllm/model_executor/layers/utils.py``): repetition divides a positive logit
(multiplies a negative one) of every token seen in the prompt or the output; frequency subtracts
``penalty x count`` over the output; presence subtracts the penalty once for every token in the
output. A seeded row draws from its own generator, so its tokens do not depend on which other
rows share the step.

Only the rows that ask pay: a batch of plain rows is the temperature / top-p path it always was.
"""
from __future__ import annotations

import torch


TOP_P_WINDOW = 1024  # top-p without top-k: the best this many first (widened if they hold < p)


def _window_probs(x: torch.Tensor, vals: torch.Tensor, t: float) -> torch.Tensor:
    """Probabilities of the window's tokens under the FULL distribution softmax(x / t) (so the
    cumulative sum says how much of the mass the window holds)."""
    return (vals / t - torch.logsumexp(x / t, -1)).exp()


def _needs_processing(row) -> bool:
    return bool(getattr(row, "logit_bias", ()) or getattr(row, "presence_penalty", 0.0)
                or getattr(row, "frequency_penalty", 0.0) or getattr(row, "repetition_penalty", 1.0) != 1.0
                or getattr(row, "allowed", None) is not None)


class RowSampler:
    """Logits processor: per-row temperature, top-k and top-p; temperature 0 means greedy (every
    logit but the largest masked). Works as a transformers LogitsProcessor (called with
    input_ids, scores) and on its own; ``sample`` then draws one token per row."""

    def __init__(self, rows: list, n_total: int, history: list | None = None) -> None:  # scheduler.Row
        pad = n_total - len(rows)
        self.rows = list(rows)
        # history[i]: (prompt ids, output ids so far) of row i, for penalties and allowed tokens
        self.history = history
        self.temps = torch.tensor([r.temperature for r in rows] + [0.0] * pad, dtype=torch.float32)
        self.top_p = torch.tensor([r.top_p for r in rows] + [1.0] * pad, dtype=torch.float32)
        self.top_k = [getattr(r, "top_k", 0) or 0 for r in rows] + [0] * pad

    def _process(self, scores: torch.Tensor) -> torch.Tensor:
        """Allowed tokens, logit bias and penalties, on the rows that ask for any."""
        todo = [i for i, r in enumerate(self.rows) if _needs_processing(r)]
        if not todo:
            return scores
        scores = scores.clone()
        vocab = scores.shape[-1]
        for i in todo:
            row = self.rows[i]
            prompt, output = self.history[i] if self.history else ((), ())
            if row.allowed is not None:
                allowed = row.allowed(list(output))  # what the row may take next
                if isinstance(allowed, torch.Tensor) and allowed.dtype == torch.bool:
                    # a mask over the vocabulary (structured.Constraint); ids past its end are out
                    n = min(vocab, allowed.shape[0])
                    scores[i, :n].masked_fill_(~allowed[:n], float("-inf"))
                    scores[i, n:] = float("-inf")
                else:  # token ids
                    keep = torch.full((vocab,), float("-inf"))
                    keep[torch.as_tensor(list(allowed), dtype=torch.long)] = 0.0
                    scores[i] += keep
            for token, bias in row.logit_bias:
                scores[i, token] += bias
            if row.repetition_penalty != 1.0:
                seen = torch.zeros(vocab, dtype=torch.bool)
                seen[torch.as_tensor(list(prompt) + list(output), dtype=torch.long)] = True
                s = scores[i]
                scores[i] = torch.where(seen, torch.where(s > 0, s / row.repetition_penalty,
                                                          s * row.repetition_penalty), s)
            if output and (row.frequency_penalty or row.presence_penalty):
                counts = torch.bincount(torch.as_tensor(list(output), dtype=torch.long), minlength=vocab)[:vocab]
                scores[i] -= row.frequency_penalty * counts + row.presence_penalty * (counts > 0)
        return scores

    def __call__(self, input_ids, scores: torch.Tensor) -> torch.Tensor:
        scores = self._process(scores.float())
        greedy = self.temps <= 0
        scores = scores / torch.where(greedy, torch.ones_like(self.temps), self.temps)[:, None]
        for i, k in enumerate(self.top_k):
            if 0 < k < scores.shape[-1] and not bool(greedy[i]):
                kth = scores[i].topk(k).values[-1]
                scores[i] = scores[i].masked_fill(scores[i] < kth, float("-inf"))
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

    def draw(self, scores: torch.Tensor, generators: list | None = None) -> list[int]:
        """One token per row, without a full sort or a full-vocabulary softmax where avoidable:
        greedy is one argmax; top-k (and top-p within it) works on the k best; top-p alone takes
        the 1,024 best and widens (x8) only while they hold less than p of the mass; plain sampling
        (no top-k, no top-p) is one inverse-CDF draw (a cumulative sum, no full-vocabulary
        multinomial). Seeded rows use their own generator."""
        scores = self._process(scores.float())
        generators = generators or [None] * scores.shape[0]
        vocab = scores.shape[-1]
        out = []
        for i in range(scores.shape[0]):
            x, t, g = scores[i], float(self.temps[i]), generators[i]
            if t <= 0:
                out.append(int(x.argmax()))
                continue
            k, p = self.top_k[i], float(self.top_p[i])
            if k <= 0 and p >= 1.0:  # the whole vocabulary: one inverse-CDF draw
                cum = (x / t - torch.logsumexp(x / t, -1)).exp().cumsum(0)
                u = torch.rand((), generator=g) * cum[-1]
                out.append(min(int(torch.searchsorted(cum, u, right=True)), vocab - 1))
                continue
            width = min(vocab, k if k > 0 else TOP_P_WINDOW)
            vals, idx = x.topk(width)
            probs = (vals / t).softmax(-1) if k > 0 else _window_probs(x, vals, t)
            if p < 1.0:
                cum = probs.cumsum(0)
                while k <= 0 and float(cum[-1]) < p and width < vocab:  # too little mass: widen
                    width = min(vocab, width * 8)
                    vals, idx = x.topk(width)
                    probs = _window_probs(x, vals, t)
                    cum = probs.cumsum(0)
                probs = probs.masked_fill((cum - probs) > p, 0.0)  # keep the first to reach p
            out.append(int(idx[torch.multinomial(probs, 1, generator=g)]))
        return out

    @staticmethod
    def sample(scores: torch.Tensor, generators: list | None = None) -> torch.Tensor:
        """One token per row; row i draws from ``generators[i]`` when it has one (a seeded
        request), the others from the global generator in one call."""
        probs = scores.softmax(-1)
        if not generators or not any(g is not None for g in generators):
            return torch.multinomial(probs, 1).squeeze(1)
        out = torch.empty(probs.shape[0], dtype=torch.long)
        free = [i for i, g in enumerate(generators) if g is None]
        if free:
            out[free] = torch.multinomial(probs[free], 1).squeeze(1)
        for i, g in enumerate(generators):
            if g is not None:
                out[i] = torch.multinomial(probs[i], 1, generator=g).item()
        return out
