"""Every accuracy request has a total deadline.

A real loopback server drips its reply one byte every DRIP seconds, less than the request
timeout, so a per-read timeout (what urllib's ``timeout`` is) never fires and the request used to
hang forever. Every way of dripping (the status line, the headers, a sized body, a chunked body,
nothing at all) against every request the accuracy stage makes (harness.accuracy's chat request,
harness.run --accuracy, the model probe of /v1/models, lm-eval's two probes) must end within the
deadline plus a grace that a hang would blow by any margin (the subprocess is killed at HANG).

For the commands run as processes the server times each connection itself, from the request to
the client hanging up: a process's start and imports on a busy machine are not in it, so the
bound holds under load (a wall-clock bound on the whole process once failed at 15.1 s there).
"""
from __future__ import annotations

import inspect
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.discovery import probe_model_id
from harness.http_deadline import Deadline, fetch
from harness.run.weights import served as served_record

REPO = Path(__file__).resolve().parents[2]
DRIP = 2.0  # seconds between two bytes: below the deadline, so no single read times out
DEADLINE = 3.0  # --request-timeout / --accuracy-request-timeout of every run here
GRACE = 12.0  # in-process calls: the other steps of a call on a busy 2-core machine
# A connection's life as the server sees it: the deadline, then up to two drips before a send
# finds the socket closed, and slack for a busy machine. Without a deadline the shortest drip
# (MODES["status_line"], 17 bytes) keeps a connection 34 s.
SERVED_LIMIT = DEADLINE + 2 * DRIP + 4.0
HANG = 60.0  # the subprocess is killed here: a request without a deadline would still be waiting

BODY = json.dumps({"choices": [{"message": {"content": "Answer: 2"}}], "data": [{"id": "m"}]}).encode()
MODES = {
    "status_line": b"HTTP/1.1 200 OK\r\n",
    "headers": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 40,
    "sized_body": (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % len(BODY)) + BODY,
    "chunked_body": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + b"".join(b"1\r\n" + bytes([c]) + b"\r\n" for c in BODY) + b"0\r\n\r\n",
    "silent": b"",
}


class DripServer:
    """Answers every request by sending ``MODES[mode]`` one byte every DRIP seconds (``silent``:
    reads the request and sends nothing), until the client hangs up."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.closed = threading.Event()
        self.spans: list[tuple[float, float]] = []  # per connection: (its request's time, seconds to its end)
        self._open = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self._open += 1
            threading.Thread(target=self._timed, args=(conn,), daemon=True).start()

    def _timed(self, conn: socket.socket) -> None:
        t0: list[float] = []
        try:
            self._drip(conn, t0)
        finally:
            with self._lock:
                self._open -= 1
                if t0:
                    self.spans.append((t0[0], time.monotonic() - t0[0]))

    def served(self, timeout: float = 2 * DRIP + 4.0) -> list[float]:
        """The connections' spans in the order their requests came, once every connection has
        ended (the client is gone)."""
        end = time.monotonic() + timeout
        while self._open and time.monotonic() < end:
            time.sleep(0.05)
        with self._lock:
            assert not self._open, f"{self._open} connection(s) still open {timeout:g} s after the client exited"
            return [span for _, span in sorted(self.spans)]

    def _drip(self, conn: socket.socket, t0: list[float]) -> None:
        with conn:
            conn.settimeout(HANG)  # the client (a fresh process) may take seconds to send under load
            try:
                conn.recv(65536)
            except OSError:
                return
            t0.append(time.monotonic())
            data = MODES[self.mode]
            for i in range(len(data) if data else 10_000):
                if self.closed.wait(DRIP):
                    return
                try:
                    if data:
                        conn.sendall(data[i:i + 1])
                    elif conn.recv(65536, socket.MSG_DONTWAIT) == b"":
                        return  # silent: the client went away (what else it sent, e.g. a body
                        # that came in a segment of its own, is read and dropped: peeked, it
                        # would stand in front of the end of the stream forever)
                except BlockingIOError:
                    continue
                except OSError:
                    return

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


@pytest.fixture(params=sorted(MODES))
def drip(request):  # every mode, or the ones a test names (indirect parametrize)
    srv = DripServer(request.param)
    yield srv
    srv.close()


def _items(tmp_path: Path) -> Path:
    p = tmp_path / "items.jsonl"
    p.write_text(json.dumps({"id": "q1", "question": "Q1: what is 1 plus 1?", "answer": "2"}) + "\n")
    return p


def _timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, *cmd], cwd=REPO, capture_output=True, text=True, timeout=HANG)
    return p, time.monotonic() - t0


# The commands run as processes prove their requests are wired to the deadline: two ways of
# dripping each (a body that never ends, and no byte at all); every way against the deadline
# itself is test_every_probe_has_a_total_deadline's, in-process and quicker.
WIRED = pytest.mark.parametrize("drip", ["chunked_body", "silent"], indirect=True)


@WIRED
def test_harness_accuracy_request_stops_at_its_deadline(drip, tmp_path):
    p, took = _timed(["-m", "harness.accuracy", "--endpoint", f"a={drip.url}", "--model", "m",
                      "--items", str(_items(tmp_path)), "--out", str(tmp_path / "o"), "--retries", "0",
                      "--request-timeout", str(DEADLINE)])
    spans = drip.served()
    assert spans and max(spans) < SERVED_LIMIT, (spans, took)
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    status = json.loads((tmp_path / "o" / "run.json").read_text())["backends"]["a"]["status"]
    assert f"no complete reply within {DEADLINE:g} s" in status


@WIRED
def test_harness_run_accuracy_stage_stops_at_its_deadline(drip, tmp_path):
    p, took = _timed(["-m", "harness.run", "--endpoint", f"a={drip.url}", "--model", "m", "--only", "accuracy",
                      "--accuracy-items", str(_items(tmp_path)), "--accuracy-retries", "0",
                      "--accuracy-request-timeout", str(DEADLINE), "--results", str(tmp_path / "r")])
    # Before the accuracy request the run asks the server what it serves, under those probes' own
    # deadline (their default); the accuracy request, the last, under --accuracy-request-timeout.
    probe = max(inspect.signature(f).parameters["timeout"].default for f in (probe_model_id, served_record))
    spans = drip.served()
    assert spans and spans[-1] < SERVED_LIMIT, (spans, took)
    assert max(spans) < probe + SERVED_LIMIT - DEADLINE, (spans, took)
    assert "Traceback" not in p.stderr, p.stderr
    [run] = list((tmp_path / "r").iterdir())
    status = json.loads((run / "accuracy" / "run.json").read_text())["backends"]["a"]["status"]
    assert f"no complete reply within {DEADLINE:g} s" in status


@pytest.mark.parametrize("probe", ["models", "serves_echo", "refused_chat_fields", "fetch"])
def test_every_probe_has_a_total_deadline(drip, probe):
    from harness.accuracy import lmeval
    from harness.discovery import DiscoveryError, probe_model_id

    calls = {
        "models": lambda: probe_model_id(drip.url, timeout=DEADLINE),
        "serves_echo": lambda: lmeval.serves_echo(drip.url, "m", timeout=DEADLINE),
        "refused_chat_fields": lambda: lmeval.refused_chat_fields(drip.url, "m", 1, timeout=DEADLINE),
        "fetch": lambda: fetch(drip.url + "/models", deadline_s=DEADLINE),
    }
    out: dict = {}

    def call() -> None:
        try:
            out["value"] = calls[probe]()
        except (DiscoveryError, Deadline) as e:
            out["error"] = e

    t0 = time.monotonic()
    th = threading.Thread(target=call, daemon=True)
    th.start()
    th.join(HANG)
    assert not th.is_alive(), f"{probe} still waiting after {HANG} s"
    assert time.monotonic() - t0 < DEADLINE + 2.0
    if probe in ("models", "fetch"):  # one line saying why
        assert "no complete reply within" in str(out["error"]), out
    else:  # a probe that gets no answer reads as "not served" / "not refused"
        assert out == {"value": False if probe == "serves_echo" else None}, out


def test_lm_eval_one_request_at_a_time_has_the_deadline_too(drip):
    """lm-eval at --concurrency 1 posts through ``requests`` (a per-read timeout, api_models.py
    model_call); inside deadline_posts, which the task runner enters around lm-eval, that post
    ends at the stage's deadline however the server drips."""
    import lm_eval.models.api_models as api

    from harness.accuracy.lmeval import deadline_posts
    from harness.http_deadline import Deadline

    real = api.requests
    with deadline_posts(DEADLINE):
        t0 = time.monotonic()
        with pytest.raises(Deadline):
            api.requests.post(drip.url + "/completions", json={"model": "m", "prompt": "Q1"}, headers={},
                              verify=True, timeout=DEADLINE)
        assert time.monotonic() - t0 < DEADLINE + 2
    assert api.requests is real


def test_the_stand_in_answers_like_requests_for_a_server_that_replies():
    import lm_eval.models.api_models as api

    from harness.accuracy.lmeval import deadline_posts
    from tests.fakes.openai import FakeOpenAI

    with FakeOpenAI(lambda body, n: {"text": "x"}, echo_logprobs=True) as srv, deadline_posts(DEADLINE):
        r = api.requests.post(srv.base_url + "/completions", json={"model": "m", "prompt": "Q1 is", "echo": True,
                                                                  "max_tokens": 1, "logprobs": 1}, headers={})
        assert r.ok and r.json()["choices"][0]["logprobs"]["tokens"] == ["Q1", "is", "x"]
        r.raise_for_status()
        bad = api.requests.post(srv.base_url + "/nowhere", json={}, headers={})
        assert not bad.ok and bad.status_code == 404
        with pytest.raises(api.requests.HTTPError):
            bad.raise_for_status()


def test_the_stand_in_sees_a_silent_client_leave_after_a_late_body():
    """A body in a segment of its own, then the client leaves: the silent server must see it go
    (it once peeked at the unread body forever and reported the connection still open)."""
    srv = DripServer("silent")
    try:
        c = socket.create_connection(("127.0.0.1", srv.port))
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
        time.sleep(0.3)  # the server's first read has the headers alone
        c.sendall(b"{}")
        c.close()
        assert len(srv.served()) == 1
    finally:
        srv.close()
