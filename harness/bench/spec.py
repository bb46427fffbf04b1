"""What one load benchmark runs, as one checked value: ``BenchSpec``.

Every caller builds one (the bench command line from its arguments, ``harness.run``'s bench
stage, the tunnel calibration, the remote bench on an instance through ``argv()``), so the checks
live here once and a bad value is one ``BenchError`` line wherever it came from. What a run needs
besides (the endpoint, the output directory, an API key or an injected client) is not part of
it: those say where, this says what.

Fields (all keyword-only):
  profile          "agent", "2k-512", "poisson-180-256" or "IN-OUT" token lengths
  concurrency      closed-loop levels (whole numbers >= 1; empty for none)
  rates            open-loop Poisson levels in requests/s, or "auto": double from
                   ``rate_start`` until the level saturates (api.saturated) or ``rate_max``
  requests | duration   measured requests per level, or seconds of measured sending per level
  warmup           warm-up requests per level (None: one per worker / ceil(rate)); excluded
  slo              "ttft_p99_ms=800,itl_p99_ms=50" or a dict (metrics.parse_slo); kept as a dict
  request_timeout  seconds per request; time_limit: seconds for the whole run (hard)
  resume           skip levels already complete in the output directory
  tokenizer        a tokenizer.json (or its directory), used only when the server reports no
                   per-chunk usage
  vllm_extras      send continuous_usage_stats / ignore_eos / min_tokens (OpenAI, SageMaker)
  max_inflight     open loop: most requests in flight at once
  seed             the profile's prompt sampling and the Poisson arrivals
  progress         rich progress bar (None: only on a terminal)
  path_probes      small round trips over the same path before the levels (0: none)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.bench import metrics
from harness.bench.load import LevelSpec
from harness.bench.path import DEFAULT_PROBES
from harness.bench.profiles import ProfileError, get_profile
from kit.errors import KitError

DEFAULT_CONCURRENCY = (1, 16, 64)


class BenchError(KitError, ValueError):
    """Bad input or an unusable output directory; the message is one line."""


def _finite_positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and not math.isinf(v)


def _whole(v: Any, least: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


@dataclass(frozen=True, kw_only=True)
class BenchSpec:
    requests: int | None = None
    duration: float | None = None
    profile: str = "agent"
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    rates: tuple[float, ...] | str = ()
    warmup: int | None = None
    slo: Mapping[str, float] | str | None = field(default_factory=dict)
    request_timeout: float = 300.0
    time_limit: float = 3600.0
    resume: bool = False
    tokenizer: str | Path | None = None
    vllm_extras: bool = True
    max_inflight: int = 1024
    seed: int = 0
    rate_start: float = 1.0
    rate_max: float = 256.0
    progress: bool | None = None
    path_probes: int = DEFAULT_PROBES

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalize once, here
        try:
            get_profile(self.profile)
        except ProfileError as e:
            raise BenchError(str(e)) from None
        if (self.requests is None) == (self.duration is None):
            raise BenchError("give exactly one of requests (N per level) or duration (seconds per level)")
        if self.requests is not None and not _whole(self.requests, 1):
            raise BenchError(f"requests {self.requests!r}: must be a whole number >= 1")
        if self.duration is not None and not _finite_positive(self.duration):
            raise BenchError(f"duration {self.duration!r}: must be > 0 seconds")
        if self.warmup is not None and not _whole(self.warmup, 0):
            raise BenchError(f"warmup {self.warmup!r}: must be a whole number >= 0")
        if not _finite_positive(self.request_timeout) or not _finite_positive(self.time_limit):
            raise BenchError("request_timeout and time_limit must be > 0 seconds")
        put(self, "concurrency", tuple(self.concurrency))
        for c in self.concurrency:
            if not _whole(c, 1):
                raise BenchError(f"concurrency {c!r}: must be a whole number >= 1")
        if isinstance(self.rates, str):
            if self.rates != "auto":
                raise BenchError(f"rates {self.rates!r}: a list of requests/s or 'auto'")
        else:
            rates = tuple(self.rates)
            for r in rates:
                if not _finite_positive(r):
                    raise BenchError(f"rate {r!r}: must be > 0 requests/s")
            put(self, "rates", tuple(float(r) for r in rates))
        if not self.concurrency and not self.rates:
            raise BenchError("nothing to run: give at least one concurrency or rate")
        if self.auto and not (_finite_positive(self.rate_start) and _finite_positive(self.rate_max)
                              and self.rate_start <= self.rate_max):
            raise BenchError(f"--rate-start {self.rate_start:g} must be > 0 and at most --rate-max "
                             f"{self.rate_max:g} (--rate auto doubles from the one up to the other)")
        if not _whole(self.max_inflight, 1):
            raise BenchError(f"max_inflight {self.max_inflight!r}: must be a whole number >= 1")
        if not _whole(self.path_probes, 0):
            raise BenchError(f"path_probes {self.path_probes!r}: must be a whole number >= 0")
        try:
            put(self, "slo", dict(self.slo) if isinstance(self.slo, Mapping) else metrics.parse_slo(self.slo))
        except metrics.SLOError as e:
            raise BenchError(str(e)) from None

    @property
    def auto(self) -> bool:
        return self.rates == "auto"

    def levels(self) -> list[LevelSpec]:
        """The fixed levels in order: every concurrency, then every listed rate (not "auto")."""
        plan = [LevelSpec(concurrency=c, requests=self.requests, duration=self.duration, warmup=self.warmup)
                for c in self.concurrency]
        if not self.auto:
            plan += [self.rate_level(r) for r in self.rates]
        return plan

    def rate_level(self, rate: float) -> LevelSpec:
        return LevelSpec(rate=float(rate), requests=self.requests, duration=self.duration, warmup=self.warmup)

    def record(self) -> dict[str, Any]:
        """What bench.json keeps of it (and what --resume compares)."""
        return {"requests": self.requests, "duration": self.duration, "warmup": self.warmup,
                "slo": dict(self.slo), "seed": self.seed, "vllm_extras": self.vllm_extras,
                "request_timeout": self.request_timeout, "time_limit": self.time_limit}

    def argv(self) -> list[str]:
        """The ``python -m harness bench`` options that make this spec (``from_args`` of the parsed
        options gives it back): how the bench runs it on an instance."""
        out = ["--profile", self.profile]
        out += ["--requests", str(self.requests)] if self.requests is not None else ["--duration", f"{self.duration!r}"]
        out += ["--concurrency", ",".join(map(str, self.concurrency))] if self.concurrency else []
        if self.rates:
            out += ["--rate", "auto" if self.auto else ",".join(repr(r) for r in self.rates)]
        if self.auto:
            out += ["--rate-start", repr(self.rate_start), "--rate-max", repr(self.rate_max)]
        if self.warmup is not None:
            out += ["--warmup", str(self.warmup)]
        if self.slo:
            out += ["--slo", ",".join(f"{k}={v!r}" for k, v in self.slo.items())]
        out += ["--request-timeout", repr(self.request_timeout), "--time-limit", repr(self.time_limit),
                "--max-inflight", str(self.max_inflight), "--seed", str(self.seed),
                "--path-probes", str(self.path_probes)]
        if self.tokenizer:
            out += ["--tokenizer", str(self.tokenizer)]
        if not self.vllm_extras:
            out.append("--no-vllm-extras")
        if self.resume:
            out.append("--resume")
        if self.progress is False:
            out.append("--quiet")
        return out

    @classmethod
    def from_args(cls, args: Any) -> "BenchSpec":
        """From ``python -m harness bench``'s parsed options (harness/bench/cli.py)."""
        concurrency: Iterable[int] = args.concurrency if args.concurrency is not None else \
            (() if args.rate else DEFAULT_CONCURRENCY)
        return cls(profile=args.profile, concurrency=tuple(concurrency), rates=args.rate or (),
                   requests=args.requests, duration=args.duration, warmup=args.warmup, slo=args.slo,
                   request_timeout=args.timeout, time_limit=args.time_limit, resume=args.resume,
                   tokenizer=args.tokenizer, vllm_extras=args.vllm_extras, max_inflight=args.max_inflight,
                   seed=args.seed, rate_start=args.rate_start, rate_max=args.rate_max,
                   path_probes=args.path_probes, progress=False if args.quiet else None)
