"""The measurement path's own round trip, measured before the levels.

What a bench reports as TTFT includes the path to the server: a tunnel, the internet to an AWS
region. Before the first level the load generator sends ``n`` small requests over the same
client (same connection pool, same tunnel) and records their round trip as ``path_rtt_ms``
``{p50, p99, n, how}`` in every level of ``summary.json`` and in ``bench.json``. The report
shows TTFT minus the path's median as "server TTFT (est.)": an estimate, since a streamed
first token and a tiny request do not cross the path identically.

Each client says how it makes its round trip (``round_trip()`` and ``round_trip_how``):
OpenAI-compatible servers answer ``GET /models``; the boto3 clients make the cheapest call their
runtime host answers without running a model (see each client). A client without one records
``n = 0`` and the reason.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from harness.bench.metrics import percentile

DEFAULT_PROBES = 20


def none(reason: str, how: str | None = None) -> dict[str, Any]:
    return {"p50": None, "p99": None, "n": 0, "how": how, "reason": reason}


async def measure_path(client: Any, n: int = DEFAULT_PROBES, *, limit_s: float = 30.0) -> dict[str, Any]:
    """``n`` timed round trips after one untimed one (which pays for connection set-up: TCP,
    TLS, a new tunnel channel; the levels reuse warm connections), within ``limit_s`` seconds:
    when that runs out, the round trips timed so far are kept (a server that never answers must
    not hold the run past its time limit)."""
    how = getattr(client, "round_trip_how", None)
    if n <= 0:
        return none("not measured (path probes set to 0)", how)
    round_trip = getattr(client, "round_trip", None)
    if round_trip is None:
        return none(f"the {getattr(client, 'protocol', '?')} client has no round trip to time", how)
    ms: list[float] = []
    try:
        async with asyncio.timeout(max(limit_s, 0.001)):
            await round_trip()
            for _ in range(n):
                t0 = time.perf_counter_ns()
                await round_trip()
                ms.append((time.perf_counter_ns() - t0) / 1e6)
    except TimeoutError:
        if not ms:
            return none(f"probe failed: no answer within {limit_s:.1f} s", how)
    except Exception as exc:  # noqa: BLE001 - a path that cannot be probed is recorded, the bench goes on
        return none(f"probe failed: {type(exc).__name__}: {str(exc)[:200]}", how)
    ms.sort()
    return {"p50": round(percentile(ms, 50), 3), "p99": round(percentile(ms, 99), 3), "n": len(ms),
            "how": how}


def server_ttft_est_ms(ttft_ms: float | None, path: dict | None) -> float | None:
    """TTFT minus the path's median round trip (an estimate; None when either is unknown)."""
    p50 = (path or {}).get("p50")
    if ttft_ms is None or p50 is None:
        return None
    return round(max(ttft_ms - p50, 0.0), 3)
