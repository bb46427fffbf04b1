"""One request's raw measurements, filled by a backend while the response streams.

Every timestamp is ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux, so comparable across
processes on one machine). Only token-carrying chunks are kept: a role-only first chunk, an
empty delta or a usage-only trailer is never a token. What a record holds on disk is described
in docs/bench.md ("Per-request records"). A record holds raw monotonic timestamps and token
counts only: queue time, TTFT, ITL, TPOT and e2e are derived by ``harness.bench.metrics`` (one
function each), never stored here.

Server-reported usage counts are untrusted input (``note_usage``): a count that is not a whole
number >= 0, a cumulative count that goes down, or a total no stream could carry given what was
received (``plausible_tokens``) fails the request with class ``bad_usage`` naming the value,
and the count is dropped so nothing downstream computes with it.
"""
from __future__ import annotations

import time
from typing import Any, Callable

now_ns = time.perf_counter_ns

TokenCounter = Callable[[list[str]], list[int]]

# A generated token decodes to at least one byte of text unless it is a special token the server
# skips (EOS, reasoning markers); a streamed chunk carries one decode step, a few tokens with
# speculative decoding. So a stream that delivered B bytes of text in N chunks cannot have made
# more than B + SPECIAL_PER_CHUNK * (N + 1) tokens. Generous on purpose: it exists to stop
# absurd counts (1e30), not to second-guess a server that is off by a few tokens.
SPECIAL_PER_CHUNK = 64


# Most token-carrying chunks one response may bring. The profiles ask for at most a few thousand
# output tokens; a server that floods chunks for the whole --timeout would otherwise grow the
# record (a timestamp and a text per chunk) without bound.
MAX_CHUNKS = 1 << 18


def plausible_tokens(n_chunks: int, text_bytes: int) -> int:
    """The most output tokens a stream of ``n_chunks`` chunks and ``text_bytes`` bytes of text
    can have carried (see SPECIAL_PER_CHUNK)."""
    return text_bytes + SPECIAL_PER_CHUNK * (n_chunks + 1)


def _count_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable token count (None when it is a whole number >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{value!r:.60} is not a whole number"
    if value < 0:
        return f"{value} is negative"
    return None


class Record:
    """Mutable while the request runs; ``to_dict`` freezes it into the JSONL form."""

    __slots__ = ("id", "meta", "warmup", "t_scheduled_ns", "t_sent_ns", "wall_sent", "t_end_ns",
                 "chunk_t", "chunk_usage", "chunk_text", "usage_prompt",
                 "usage_completion", "finish_reason", "ok", "error", "error_detail",
                 "http_status", "retries", "retry_wait_ms", "closed", "usage_bad")

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
        self.usage_bad = False  # the server sent an unusable count: every count is ignored

    # -- filled by backends -------------------------------------------------------------------
    def mark_sent(self) -> None:
        self.wall_sent = time.time()
        self.t_sent_ns = now_ns()

    def add_chunk(self, t_ns: int, text: str, usage_completion: int | None = None) -> None:
        if self.closed:
            return
        if len(self.chunk_t) >= MAX_CHUNKS:  # a flood: what a request holds stays bounded
            self.fail("oversized", f"more than {MAX_CHUNKS} token chunks in one response")
            self.closed = True  # later chunks are ignored and the client stops reading
            return
        self.chunk_t.append(t_ns)
        self.chunk_usage.append(usage_completion)
        self.chunk_text.append(text)

    def note_usage(self, completion: Any = None, prompt: Any = None) -> int | None:
        """Take the server's usage counts (None: not sent). Returns the completion count when it
        is usable. A count that is not a whole number >= 0, or a completion count lower than one
        seen before (they are cumulative), fails the request as ``bad_usage``."""
        if self.usage_bad:
            return None
        for name, value in (("completion_tokens", completion), ("prompt_tokens", prompt)):
            if value is None:
                continue
            why = _count_problem(value)
            if why is None and name == "completion_tokens" and self.usage_completion is not None \
                    and value < self.usage_completion:
                why = f"{value} is below the {self.usage_completion} reported before (cumulative)"
            if why is not None:
                return self._bad_usage(f"server's {name}: {why}")
        if prompt is not None:
            self.usage_prompt = prompt
        if completion is not None:
            self.usage_completion = completion
        return completion

    def _bad_usage(self, detail: str) -> None:
        self.usage_bad = True
        self.usage_completion = None
        self.usage_prompt = None
        self.chunk_usage = [None] * len(self.chunk_usage)
        self.fail("bad_usage", detail)
        return None

    def _check_plausible(self) -> None:
        claimed = self.usage_completion
        if claimed is None:
            return
        n = len(self.chunk_t)
        nbytes = sum(len(t.encode("utf-8", "replace")) for t in self.chunk_text)
        limit = plausible_tokens(n, nbytes)
        if claimed > limit:
            self._bad_usage(f"server's completion_tokens {claimed} is implausible for {n} chunks "
                            f"and {nbytes} bytes of text received (at most {limit})")

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
        if not self.usage_bad:
            self._check_plausible()
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
            for u in usage:  # validated by note_usage: whole numbers, never decreasing
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
    remainder first, at least one token per chunk while the total allows. Integer arithmetic and
    loops bounded by the number of chunks, whatever the total (the total is the server's number)."""
    n = len(weights)
    if total <= n:
        return [1] * total + [0] * (n - total)
    wsum = sum(weights)
    if not wsum:
        weights, wsum = [1] * n, n
    ks = [max(1, total * w // wsum) for w in weights]
    rems = [total * w % wsum for w in weights]
    short = total - sum(ks)  # < n: the floors lost less than one token per chunk
    if short > 0:
        for i in sorted(range(n), key=lambda i: rems[i], reverse=True)[:short]:
            ks[i] += 1
    over = sum(ks) - total  # the one-token minimum overshot: take from the largest
    for i in sorted(range(n), key=lambda i: ks[i], reverse=True):
        if over <= 0:
            break
        take = min(over, ks[i] - 1)
        ks[i] -= take
        over -= take
    return ks
