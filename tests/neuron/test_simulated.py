"""The paced stand-in device: the real host path at Gemma 4's vocabulary, and the efficiency table
``make bench-engine`` prints from it."""
from __future__ import annotations

import time

import httpx
import pytest

pytest.importorskip("torch", reason="the engine needs torch")

from ami.neuron import simulated
from ami.neuron.generator import Limits

from .conftest import InProcessServer


@pytest.fixture(scope="module")
def tokenizer():
    return simulated.build_tokenizer()


def test_the_tokenizer_has_gemma4s_vocabulary_and_its_control_tokens(tokenizer):
    assert len(tokenizer) == simulated.VOCAB == 262_144
    assert tokenizer.convert_tokens_to_ids("<turn|>") != tokenizer.unk_token_id
    assert tokenizer.decode([200_000, 262_143]) == "w200000 w262143"


@pytest.mark.parametrize("sampling", ["device", "host"])
def test_the_openai_api_over_the_paced_device(monkeypatch, tokenizer, sampling):
    monkeypatch.setattr(simulated, "build_tokenizer", lambda: tokenizer)
    gen = simulated.make_generator("simulated-gemma4", Limits(2048, 4096, 4), 0.0, step_ms=5, prefill_ms=20,
                                   sampling=sampling)
    runner = gen.scheduler.runner
    with InProcessServer(gen, "simulated") as srv, httpx.Client(timeout=60) as c:
        health = c.get(srv.url + "/health").json()
        assert health["device"] == "simulated" and "simulated" in health
        body = {"model": "simulated-gemma4", "messages": [{"role": "user", "content": "w300 w301"}],
                "max_tokens": 20, "ignore_eos": True}
        t0 = time.perf_counter()
        plain = c.post(srv.url + "/v1/chat/completions", json=body).json()
        took = time.perf_counter() - t0
        lp = c.post(srv.url + "/v1/chat/completions", json={**body, "logprobs": True, "top_logprobs": 2}).json()
    assert plain["usage"]["completion_tokens"] == 20 and plain["choices"][0]["message"]["content"].startswith("w")
    # the device's time is spent whatever the host does: one prefill and 19 steps at least
    assert took >= 0.020 + 19 * 0.005
    entries = lp["choices"][0]["logprobs"]["content"]
    assert len(entries) == 20 and all(len(e["top_logprobs"]) == 2 for e in entries)
    assert runner.prefills == 2 and runner.steps >= 38


def test_device_rate_counts_prefills_and_shared_steps():
    from harness.calibration.host_efficiency import Level, device_rate

    # 8 requests of 64 tokens over 4 rows: 8 x 40 ms + 8 x 63 / 4 x 6 ms = 1.076 s for 512 tokens
    assert device_rate(Level(4, 4, "device", "greedy"), 64, 8, 6.0, 40.0) == pytest.approx(512 / 1.076)
    # more streams than rows decode in rows of the batch
    assert device_rate(Level(4, 64, "device", "greedy"), 64, 8, 6.0, 40.0) == pytest.approx(512 / 1.076)
    assert device_rate(Level(8, 2, "device", "greedy"), 64, 8, 6.0, 40.0) == pytest.approx(512 / (0.32 + 8 * 63 / 2 * 0.006))


@pytest.mark.slow
def test_bench_engine_prints_the_efficiency_of_a_level(monkeypatch):
    from harness.calibration import host_efficiency

    monkeypatch.setattr(host_efficiency, "levels", lambda: [host_efficiency.Level(2, 2, "device", "greedy")])
    lines: list[str] = []
    assert host_efficiency.main(6.0, 20.0, 16, echo=lines.append) == 0
    row = lines[-1].split()
    assert row[:4] == ["2", "2", "device", "greedy"]
    efficiency = float(row[6])
    assert 0.0 < efficiency <= 1.05  # delivered over what the paced device allows
