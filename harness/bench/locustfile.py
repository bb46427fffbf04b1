"""Locust user for load from several machines, with the benchmark's own request code and metrics.

    locust -f harness/bench/locustfile.py --host http://HOST:8000 --headless -u 64 -r 64 -t 5m \
        --bench-profile 2k-512 --bench-out results/locust
    # more machines: one master, N workers (each worker writes its own records file)
    locust -f harness/bench/locustfile.py --master --expect-workers 2 --headless -u 128 -r 128 -t 5m ...
    locust -f harness/bench/locustfile.py --worker --master-host MASTER_IP   # --bench-* come from the master
    python -m harness.bench.summarize results/locust     # summary.json/csv from every worker's records

Same request bodies (profiles, ``chat_body``), same SSE parser and per-request records as
``python -m harness.bench``; only the transport is Locust's (gevent + requests). Each finished
request is appended (and flushed) to ``<bench-out>/requests-<host>-<pid>.jsonl``; Locust's own statistics get
``TTFT`` and ``E2E`` entries next to the HTTP one. A user is one closed-loop stream, so the
records carry ``concurrency`` = the number of users.
"""
from __future__ import annotations

import itertools
import json
import os
import socket
import time
import uuid
from pathlib import Path

import requests
from locust import HttpUser, events, task
from locust.runners import WorkerRunner

from harness.bench import metrics
from harness.bench.clients.body import chat_body, http_error_class
from harness.bench.profiles import get_profile
from harness.bench.record import Record, now_ns
from harness.bench.sse import OpenAIStreamParser
from kit.contracts.results import BENCH_REQUESTS

_counter = itertools.count()
_state: dict = {}


@events.init_command_line_parser.add_listener
def _args(parser) -> None:
    parser.add_argument("--bench-profile", default="agent", help="agent | 2k-512 | poisson-180-256 | IN-OUT")
    parser.add_argument("--bench-model", default="", help="model id (default: first of /v1/models)")
    parser.add_argument("--bench-out", default="locust-bench", help="directory for request records")
    parser.add_argument("--bench-no-vllm-extras", action="store_true", default=False)
    # Set by the master (or a standalone run) at test start and sent on to every worker with the
    # other custom options: one level_run and the total user count for all workers' records.
    parser.add_argument("--bench-run-id", default="", help="(set automatically)")
    parser.add_argument("--bench-users", type=int, default=0, help="(set automatically)")


@events.init.add_listener
def _fresh_clock(environment, **_kw) -> None:
    """Refresh gevent's cached loop time before Locust arms its ``--run-time`` timer (right after
    this event): gevent timers count from the loop's clock as of its last iteration, so the time
    spent starting up since then (imports; seconds on a busy machine) was taken off ``-t``: a
    ``-t 3s`` run stopped 60 ms after "Run time limit set" (measured here, gevent 26.9.0, Locust
    2.47.0; ``gevent.sleep(0.01)``, 2 s of blocking work, then ``spawn_later(3)`` fired after 1 s)."""
    import gevent

    gevent.get_hub().loop.update_now()


@events.test_start.add_listener
def _start(environment, **_kw) -> None:
    opts = environment.parsed_options
    if not isinstance(environment.runner, WorkerRunner):
        # a worker's own -u is not the run's: it gets these from the master's spawn message
        opts.bench_run_id = f"locust-{uuid.uuid4().hex[:8]}"
        opts.bench_users = opts.num_users or 1
    _state["profile"] = get_profile(opts.bench_profile)
    _state["out"] = Path(opts.bench_out) / f"requests-{socket.gethostname()}-{os.getpid()}.jsonl"
    _state["level_run"] = opts.bench_run_id or f"locust-{uuid.uuid4().hex[:8]}"
    _state["users"] = opts.bench_users or opts.num_users or 1
    _state["extras"] = not opts.bench_no_vllm_extras
    _state["model"] = opts.bench_model or None


def _write(record: dict) -> None:
    """Append and flush, no fsync: an fsync blocks every greenlet of this worker for
    milliseconds, which its other streams would record as latency. A flushed line survives the
    process being killed; only an OS crash can lose it."""
    f = _state.get("file")
    if f is None:
        _state["out"].parent.mkdir(parents=True, exist_ok=True)
        f = _state["file"] = open(_state["out"], "a", encoding="utf-8")  # noqa: SIM115 - closed at test_stop
    f.write(json.dumps(BENCH_REQUESTS.stamp(record, check=False), separators=(",", ":"), default=str) + "\n")
    f.flush()


@events.test_stop.add_listener
def _stop(environment, **_kw) -> None:
    f = _state.pop("file", None)
    if f is not None:
        f.close()


def _prefix(host: str) -> str:
    return "" if host.rstrip("/").endswith("/v1") else "/v1"


class BenchUser(HttpUser):
    """One stream: sends the next request as soon as the previous one finished."""

    def on_start(self) -> None:
        self.prefix = _prefix(self.host or "")
        if not _state.get("model"):
            resp = self.client.get(self.prefix + "/models", name="models")
            _state["model"] = resp.json()["data"][0]["id"]

    @task
    def chat(self) -> None:
        prof = _state["profile"]
        i = next(_counter)
        meta = {"endpoint": self.host, "protocol": "openai", "model": _state["model"],
                "profile": prof.name, "concurrency": _state["users"], "level_run": _state["level_run"],
                "client": "locust"}
        rec = Record(f"{_state['level_run']}-{os.getpid()}-{i:06d}", meta)
        body = chat_body(prof.request(i, seed=os.getpid()), _state["model"], vllm_extras=_state["extras"])
        parser = OpenAIStreamParser(rec)
        rec.mark_sent()
        try:
            with self.client.post(self.prefix + "/chat/completions", json=body, stream=True,
                                  catch_response=True, name="chat/completions",
                                  headers={"X-Request-Id": rec.id}) as resp:
                rec.http_status = resp.status_code
                if resp.status_code != 200:
                    rec.fail(http_error_class(resp.status_code), resp.text[:300], resp.status_code)
                    resp.failure(f"HTTP {resp.status_code}")
                else:
                    for data in resp.iter_content(chunk_size=None):
                        parser.feed(data, now_ns())
                        if parser.aborted or rec.closed:  # oversized (sse.MAX_LINE, record.MAX_CHUNKS)
                            break
                    parser.close(now_ns())
                    if rec.error is None and not parser.complete():
                        rec.fail("dropped", "stream ended without finish_reason or [DONE]")
                    if rec.error:
                        resp.failure(rec.error)
                    else:
                        resp.success()
        except requests.exceptions.ConnectionError as e:
            rec.fail("dropped" if rec.t_sent_ns and rec.chunk_t else "connect", str(e))
        except requests.exceptions.ChunkedEncodingError as e:
            rec.fail("dropped", str(e))
        except requests.exceptions.Timeout as e:
            rec.fail("timeout", str(e))
        except BaseException:  # GreenletExit when Locust stops mid-request: recorded, not lost
            rec.fail("timeout", "cancelled: locust stopped the user")
            rec.finish(ok=False)
            _write(rec.to_dict())
            raise
        rec.finish(ok=rec.error is None)
        d = rec.to_dict()
        _write(d)
        env = self.environment
        if d["ok"]:
            env.events.request.fire(request_type="TTFT", name="ttft", response_time=metrics.ttft_ms(d),
                                    response_length=d["output_tokens"], exception=None, context={})
            env.events.request.fire(request_type="E2E", name="e2e", response_time=metrics.e2e_ms(d),
                                    response_length=d["output_tokens"], exception=None, context={})
        time.sleep(0)  # yield to other users
