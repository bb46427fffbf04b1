"""BenchSpec is the one place a benchmark's settings are checked, and its command-line form
(``argv()``, what the remote bench sends to an instance) parses back to the same spec."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.bench.cli import build_parser
from harness.bench.spec import BenchError, BenchSpec


def _parsed(spec: BenchSpec) -> BenchSpec:
    return BenchSpec.from_args(build_parser().parse_args([*spec.argv(), "--base-url", "http://h/v1",
                                                          "--out", "o"]))


@pytest.mark.parametrize("spec", [
    BenchSpec(requests=3),
    BenchSpec(profile="10-4", concurrency=(1, 2), requests=3, slo="ttft_p99_ms=800,itl_p99_ms=50.5"),
    BenchSpec(concurrency=(), rates=(0.5, 2.0), duration=12.5, warmup=0, seed=7, path_probes=0,
              request_timeout=30.0, time_limit=99.0, max_inflight=64, vllm_extras=False, progress=False),
    BenchSpec(profile="2k-512", concurrency=(), rates="auto", rate_start=2.0, rate_max=16.0, requests=8,
              tokenizer="tok.json", resume=True),
], ids=["defaults", "slo", "open-loop", "auto"])
def test_argv_parses_back_to_the_same_spec(spec):
    back = _parsed(spec)
    # --quiet is how the command line says progress=False; None (on a terminal) has no flag
    assert back == replace(spec, progress=back.progress) and back.progress in (spec.progress, None)


def test_cli_defaults_are_the_spec_defaults():
    args = build_parser().parse_args(["--base-url", "http://h/v1", "--out", "o", "--requests", "5"])
    assert BenchSpec.from_args(args) == BenchSpec(requests=5)
    only_rates = build_parser().parse_args(["--base-url", "u", "--out", "o", "--requests", "5", "--rate", "2"])
    assert BenchSpec.from_args(only_rates).concurrency == ()  # --rate alone: no closed-loop levels


def test_levels_in_order_and_auto_rates_not_planned():
    spec = BenchSpec(concurrency=(1, 4), rates=(2.0,), requests=3, warmup=1)
    assert [(lv.concurrency, lv.rate, lv.requests, lv.warmup) for lv in spec.levels()] == \
        [(1, None, 3, 1), (4, None, 3, 1), (None, 2.0, 3, 1)]
    assert [lv.concurrency for lv in BenchSpec(concurrency=(2,), rates="auto", requests=1).levels()] == [2]


def test_slo_text_is_kept_as_a_dict():
    assert BenchSpec(requests=1, slo="ttft_p99_ms=800").slo == {"ttft_p99_ms": 800.0}
    assert BenchSpec(requests=1, slo=None).slo == {}


@pytest.mark.parametrize("kw, says", [
    (dict(), "exactly one of requests"),
    (dict(requests=2, duration=1.0), "exactly one of requests"),
    (dict(requests=0), "requests 0"),
    (dict(requests=True), "requests True"),
    (dict(duration=-1.0), "duration -1.0"),
    (dict(requests=1, warmup=-1), "warmup -1"),
    (dict(requests=1, concurrency=(0,)), "concurrency 0"),
    (dict(requests=1, concurrency=(2.5,)), "concurrency 2.5"),
    (dict(requests=1, rates=(0.0,)), "rate 0.0"),
    (dict(requests=1, rates=(float("inf"),)), "rate inf"),
    (dict(requests=1, rates="fast"), "rates 'fast'"),
    (dict(requests=1, concurrency=(), rates=()), "nothing to run"),
    (dict(requests=1, rates="auto", rate_start=8.0, rate_max=4.0), "--rate-start 8"),
    (dict(requests=1, request_timeout=0), "request_timeout and time_limit"),
    (dict(requests=1, time_limit=float("inf")), "request_timeout and time_limit"),
    (dict(requests=1, max_inflight=0), "max_inflight 0"),
    (dict(requests=1, path_probes=-1), "path_probes -1"),
    (dict(requests=1, slo="ttft=800"), "--slo 'ttft=800'"),
    (dict(requests=1, profile="nope"), "nope"),
])
def test_bad_values_are_one_line_naming_the_value(kw, says):
    with pytest.raises(BenchError) as e:
        BenchSpec(**kw)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_spec_is_frozen():
    with pytest.raises(AttributeError):
        BenchSpec(requests=1).requests = 2  # type: ignore[misc]
