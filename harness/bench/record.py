"""One request's raw measurements, filled by a backend while the response streams.

Every timestamp is ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux, so comparable across
processes on one machine). Only token-carrying chunks are kept: a role-only first chunk, an
empty delta or a usage-only trailer is never a token. What a record holds on disk is described
in docs/bench.md ("Per-request records"). A record holds raw monotonic timestamps and token
counts only: queue time, TTFT, ITL, TPOT and e2e are derived by ``harness.bench.metrics`` (one
function each), never stored here.
"""
from __future__ import annotations

import time
from typing import Any, Callable

now_ns = time.perf_counter_ns

TokenCounter = Callable[[list[str]], list[int]]


class Record:
    """Mutable while the request runs; ``to_dict`` freezes it into the JSONL form."""

    __slots__ = ("id", "meta", "warmup", "t_scheduled_ns", "t_sent_ns", "wall_sent", "t_end_ns",
                 "chunk_t", "chunk_usage", "chunk_text", "usage_prompt",
                 "usage_completion", "finish_reason", "ok", "error", "error_detail",
                 "http_status", "retries", "retry_wait_ms", "closed")

    def __init__(self, rid: str, meta: dict[str, Any], *, warmup: bool = False,
                 t_scheduled_ns: int | None = None) -> None:
        self.id = rid
        self.meta = meta  # level, profile, backend, model … copied into the record as is
        self.warmup = warmup
        self.t_scheduled_ns = now_ns() if t_scheduled_ns is None else t_scheduled_ns
        self.t_sent_ns: int | None = None
        self.wall_sent: float | None = None
        self.t_end_ns: int | None = None
        self.chunk_t: list[int] = []  # arrival time of each token-carrying chunk
        self.chunk_usage: list[int | None] = []  # server's cumulative completion_tokens, if sent
        self.chunk_text: list[str] = []  # text of each chunk (kept for tokenizer / char counts)
        self.usage_prompt: int | None = None
        self.usage_completion: int | None = None
        self.finish_reason: str | None = None
        self.ok = False
        self.error: str | None = None
        self.error_detail: str | None = None
        self.http_status: int | None = None
        self.retries = 0
        self.retry_wait_ms = 0.0
        self.closed = False  # set when the driver gave up (timeout): late chunks are ignored

    # -- filled by backends -------------------------------------------------------------------
    def mark_sent(self) -> None:
        self.wall_sent = time.time()
        self.t_sent_ns = now_ns()

    def add_chunk(self, t_ns: int, text: str, usage_completion: int | None = None) -> None:
        if self.closed:
            return
        self.chunk_t.append(t_ns)
        self.chunk_usage.append(usage_completion)
        self.chunk_text.append(text)

    def fail(self, error: str, detail: str = "", status: int | None = None) -> None:
        if self.error is None:  # the first cause wins: a timeout after a drop stays a drop
            self.error = error
            self.error_detail = detail[:300]
            if status is not None:
                self.http_status = status
        self.ok = False

    def finish(self, ok: bool | None = None) -> None:
        if self.t_end_ns is None:
            self.t_end_ns = now_ns()
        if ok and self.error is None and not self.chunk_t and not self.closed:
            # a "complete" answer without a single token (e.g. a server that ignored stream:
            # true) has no TTFT or ITL to give: count it as failed, not as a fast success
            self.fail("empty", "the response completed without any token")
            return self._close()
        if ok is not None and self.error is None:
            self.ok = ok
        self._close()

    def _close(self) -> None:
        self.closed = True

    # -- frozen form ---------------------------------------------------------------------------
    def chunk_tokens(self, count: TokenCounter | None) -> tuple[list[int], str, int, str]:
        """Tokens per chunk and output tokens, each with the source it came from.

        Per chunk: the server's cumulative usage deltas when every chunk carried usage
        (vLLM ``continuous_usage_stats``) → "usage_delta"; else a tokenizer → "tokenizer"; else,
        with a final usage total, the total spread over chunks by characters → "usage_by_chars";
        else one token per chunk → "chunks".
        Output total: server usage → "usage"; else tokenizer → "tokenizer"; else chunk count.
        """
        n = len(self.chunk_t)
        usage = self.chunk_usage
        if n and all(u is not None for u in usage):
            ks, prev = [], 0
            for u in usage:
                ks.append(max(0, u - prev))  # type: ignore[operator]
                prev = max(prev, u)  # type: ignore[type-var]
            per_chunk = "usage_delta"
        elif count is not None and n:
            ks, per_chunk = list(count(self.chunk_text)), "tokenizer"
        elif self.usage_completion is not None and n:
            ks, per_chunk = _spread(self.usage_completion, [len(t) for t in self.chunk_text]), \
                "usage_by_chars"
        else:
            ks, per_chunk = [1] * n, "chunks"
        if self.usage_completion is not None:
            total, source = self.usage_completion, "usage"
        elif per_chunk == "tokenizer":
            total, source = sum(ks), "tokenizer"
        else:
            total, source = sum(ks), "chunks"
        return ks, per_chunk, total, source

    def to_dict(self, count: TokenCounter | None = None) -> dict[str, Any]:
        ks, per_chunk, total, source = self.chunk_tokens(count)
        sent = self.t_sent_ns
        end = self.t_end_ns
        d: dict[str, Any] = {"id": self.id, **self.meta, "warmup": self.warmup, "ok": self.ok,
                             "error": self.error}
        if self.error_detail:
            d["error_detail"] = self.error_detail
        d.update({
            "http_status": self.http_status,
            "finish_reason": self.finish_reason,
            "retries": self.retries,
            "retry_wait_ms": round(self.retry_wait_ms, 3),
            "wall_sent": self.wall_sent,
            "t_scheduled_ns": self.t_scheduled_ns,
            "t_sent_ns": sent,
            "t_end_ns": end,
            "prompt_tokens": self.usage_prompt,
            "output_tokens": total,
            "output_tokens_source": source,
            "chunk_tokens_source": per_chunk,
            # chunk arrival times in µs after send, and the tokens each chunk carried
            "chunk_us": [(t - sent) // 1000 for t in self.chunk_t] if sent is not None else [],
            "chunk_tokens": ks,
        })
        return d


def _spread(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (characters), largest
    remainder first, at least one token per chunk while the total allows."""
    n = len(weights)
    if total <= n:
        return [1] * total + [0] * (n - total)
    wsum = sum(weights)
    shares = [total * (w / wsum if wsum else 1 / n) for w in weights]
    ks = [max(1, int(s)) for s in shares]
    order = sorted(range(n), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    while sum(ks) < total:
        for i in order:
            if sum(ks) >= total:
                break
            ks[i] += 1
    while sum(ks) > total:  # the one-token minimum overshot: take from the largest
        j = max(range(n), key=lambda i: ks[i])
        ks[j] -= 1
    return ks
