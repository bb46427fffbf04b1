"""Hostile servers and careless command lines against the bench.

A small stdlib HTTP server on loopback answers /v1/chat/completions the way the row's mode says:
absurd, wrong-typed, negative or decreasing usage counts, a non-streamed answer, one line of
tens of MB, a stream that never ends. Every row runs the real CLI in its own process, so a hang
is a failed test (subprocess timeout), not a stuck suite. What must hold for every row: the run
ends within --time-limit + a few seconds, no traceback, every request sent is in
requests.jsonl with the row's error class, and no rate in summary.json is negative.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.bench.conftest import REPO
from tests.conftest import saved_levels

TIME_LIMIT = 15.0  # --time-limit of every run; a run must end within it + GRACE
GRACE = 8.0  # process start and imports on a busy 2-core machine included


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(text: str = "", finish: str | None = None, usage: dict | None = None) -> bytes:
    c = {"id": "x", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return _sse(c)


def _final_usage(count) -> list[bytes]:
    """Three text chunks, then a trailer whose completion_tokens is ``count``."""
    return [_chunk("hello "), _chunk("world "), _chunk("again", "stop"),
            _sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": count}}),
            b"data: [DONE]\n\n"]


def _cumulative(counts) -> list[bytes]:
    """One chunk per count, each carrying it as the cumulative usage (continuous_usage_stats)."""
    out = [_chunk(f"t{i} ", "stop" if i == len(counts) - 1 else None,
                  {"prompt_tokens": 3, "completion_tokens": n}) for i, n in enumerate(counts)]
    return out + [b"data: [DONE]\n\n"]


# mode -> (content type, list of body pieces or a callable writing them)
MODES: dict[str, tuple[str, object]] = {
    "normal": ("text/event-stream", _cumulative([1, 2, 3])),
    "usage_1e30": ("text/event-stream", _final_usage(1e30)),
    "usage_1.5e308": ("text/event-stream", _final_usage(1.5e308)),
    "usage_int_1e30": ("text/event-stream", _final_usage(10 ** 18)),
    "usage_string": ("text/event-stream", _final_usage("abc")),
    "usage_negative": ("text/event-stream", _final_usage(-5)),
    "usage_bool": ("text/event-stream", _final_usage(True)),
    "cumulative_goes_negative": ("text/event-stream", _cumulative([1, 2, 3, -50])),
    "cumulative_goes_down": ("text/event-stream", _cumulative([5, 6, 7, 2])),
    "ignores_stream_json": ("application/json", [json.dumps({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()]),
    "ignores_stream_as_sse_type": ("text/event-stream", [json.dumps({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode() + b"\n"]),
    "error_nested_1000": ("text/event-stream", [
        b'data: {"error": ' + b"[" * 1000 + b"]" * 1000 + b"}\n\n", b"data: [DONE]\n\n"]),
    "line_40mb": ("text/event-stream", "line_40mb"),
    "never_ends": ("text/event-stream", "never_ends"),
    "flood": ("text/event-stream", "flood"),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "normal"
    get_mode = "normal"

    def log_message(self, *a) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if type(self).get_mode == "hang":  # /models never answers
            time.sleep(120)
            return
        if type(self).get_mode == "endless":  # /models answers a body without end
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b" " * 65536)
            except OSError:
                return
        body = json.dumps({"data": [{"id": "hostile"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ctype, body = MODES[type(self).mode]
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            if body == "line_40mb":
                self.wfile.write(b"data: {\"x\": \"")
                piece = b"a" * 65536
                for _ in range(40 * 16):
                    self.wfile.write(piece)
                self.wfile.write(b"\"}\n\n")
            elif body == "flood":  # token chunks as fast as the socket takes them, no end
                burst = _chunk("x") * 4096
                while True:
                    self.wfile.write(burst)
            elif body == "never_ends":
                while True:
                    self.wfile.write(_chunk("x"))
                    self.wfile.flush()
                    time.sleep(0.05)
            else:
                for piece in body:  # type: ignore[union-attr]
                    self.wfile.write(piece)
                    self.wfile.flush()
        except OSError:  # the client hung up (as it should for some modes)
            pass


@pytest.fixture(scope="module")
def hostile():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()


def cli(*args: str, timeout: float = TIME_LIMIT + GRACE + 20) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "harness.bench", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def _run(url: str, out: Path, *extra: str, requests: int = 2) -> tuple[subprocess.CompletedProcess, float]:
    return cli("--base-url", url, "--model", "hostile", "--concurrency", "1", "--requests",
               str(requests), "--warmup", "0", "--profile", "10-8", "--path-probes", "0",
               "--time-limit", str(TIME_LIMIT), "--timeout", "10", "--quiet", "--out", str(out),
               *extra)


@pytest.mark.parametrize("mode,error,detail", [
    ("usage_1e30", "bad_usage", "not a whole number"),
    ("usage_1.5e308", "bad_usage", "not a whole number"),
    ("usage_int_1e30", "bad_usage", "implausible"),
    ("usage_string", "bad_usage", "not a whole number"),
    ("usage_negative", "bad_usage", "negative"),
    ("usage_bool", "bad_usage", "not a whole number"),
    ("cumulative_goes_negative", "bad_usage", "negative"),
    ("cumulative_goes_down", "bad_usage", "below"),
    ("ignores_stream_json", "empty", "stream: true"),
    ("ignores_stream_as_sse_type", "empty", "stream: true"),
    ("line_40mb", "oversized", "limit"),
    ("error_nested_1000", "stream_error", "[[[["),
    ("flood", "oversized", "token chunks"),
])
def test_hostile_server_is_recorded_with_its_class_never_hangs_never_a_negative_rate(
        hostile, tmp_path, mode, error, detail):
    _Handler.mode = mode
    out = tmp_path / "o"
    p, took = _run(hostile, out)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 3, p.stderr  # every request failed: nothing was measured, and the exit says so
    assert took < TIME_LIMIT + GRACE, took
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 2
    for r in recs:
        assert r["ok"] is False and r["error"] == error, r
        assert detail in r.get("error_detail", ""), r
        assert isinstance(r["output_tokens"], int) and r["output_tokens"] >= 0
    lv = saved_levels(out / "summary.json")[0]
    assert lv["errors"] == {error: 2} and lv["completed"] == 0
    for key in ("output_tok_s", "request_s", "goodput_request_s", "output_tok_s_peak"):
        assert lv[key] >= 0


def test_a_sane_server_through_the_same_harness_completes(hostile, tmp_path):
    _Handler.mode = "normal"
    p, _ = _run(hostile, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    lv = saved_levels(tmp_path / "o" / "summary.json")[0]
    assert lv["completed"] == 2 and lv["output_tokens"] == 6 and lv["output_tok_s"] > 0


def test_a_stream_that_never_ends_stops_at_the_time_limit_with_every_request_recorded(hostile, tmp_path):
    _Handler.mode = "never_ends"
    out = tmp_path / "o"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "harness.bench", "--base-url", hostile, "--model", "m",
                        "--concurrency", "2", "--requests", "4", "--warmup", "0", "--profile", "10-8",
                        "--path-probes", "0", "--time-limit", "3", "--timeout", "300", "--quiet",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert took < 3 + GRACE, took
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    # both streams were sent and cut at the limit; a worker may also record one more that the
    # limit stopped before it was sent
    assert sum(1 for r in recs if r["t_sent_ns"] is not None) == 2, recs
    assert len(recs) >= 2 and all(r["error"] == "timeout" for r in recs), recs


@pytest.mark.parametrize("get_mode", ["hang", "endless"])
def test_path_probes_against_a_models_endpoint_that_never_answers_keep_the_time_limit(
        hostile, tmp_path, get_mode):
    _Handler.mode, _Handler.get_mode = "normal", get_mode
    try:
        out = tmp_path / "o"
        p, took = cli("--base-url", hostile, "--model", "hostile", "--concurrency", "1",
                      "--requests", "1", "--warmup", "0", "--profile", "10-8", "--path-probes", "3",
                      "--time-limit", "6", "--quiet", "--out", str(out), timeout=60)
    finally:
        _Handler.get_mode = "normal"
    assert "Traceback" not in p.stderr, p.stderr
    assert took < 6 + GRACE, took
    assert (out / "bench.json").is_file()
    path = json.loads((out / "bench.json").read_text())["path_rtt_ms"]
    if get_mode == "hang":  # no answer: no round trip, and the reason says so
        assert path["n"] == 0 and "no answer within" in path["reason"], path
    lv = saved_levels(out / "summary.json")[0]
    assert lv["completed"] == 1, lv  # the level still ran


def test_model_discovery_against_an_endless_model_list_is_one_line_and_quick(hostile, tmp_path):
    _Handler.get_mode = "endless"
    try:
        p, took = cli("--base-url", hostile, "--requests", "1", "--out", str(tmp_path / "o"), timeout=60)
    finally:
        _Handler.get_mode = "normal"
    _one_line(p, "--model")
    assert took < GRACE, took  # 1 MiB is read, not 15 s of an endless body


def test_sse_parser_is_linear_in_one_huge_line_and_caps_it():
    """One line fed in 1 KiB reads: joined once (the old parser re-copied it on every read,
    ~quadratic: 8 MiB took many seconds); past sse.MAX_LINE it is ``oversized``."""
    from harness.bench.record import Record
    from harness.bench.sse import MAX_LINE, OpenAIStreamParser

    rec = Record("r", {})
    p = OpenAIStreamParser(rec)
    piece = b"a" * 1024
    t0 = time.process_time()
    p.feed(b'data: {"choices":[{"delta":{"content":"', 1)
    for _ in range(8 * 1024):
        p.feed(piece, 1)
    p.feed(b'"},"finish_reason":"stop"}]}\n\n', 2)
    cpu = time.process_time() - t0
    assert rec.error is None and len(rec.chunk_text) == 1 and len(rec.chunk_text[0]) == 8 * 1024 * 1024
    assert cpu < 1.5, cpu  # measured ~0.05 s after; the quadratic parser needed ~30 GB of copies
    rec2 = Record("r2", {})
    p2 = OpenAIStreamParser(rec2)
    for _ in range(MAX_LINE // len(piece) + 2):
        p2.feed(piece, 1)
    assert rec2.error == "oversized" and p2.aborted


# -- the command line -----------------------------------------------------------------------------
def _one_line(p: subprocess.CompletedProcess, needle: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("out,needle", [
    ("FILE/sub", "--out"),  # a regular file as the parent directory
    ("/proc/hostile-bench", "--out"),
    ("/proc", "--out"),
    ("", "--out"),
])
def test_unusable_out_is_one_line(hostile, tmp_path, out, needle):
    _Handler.mode = "normal"
    (tmp_path / "FILE").write_text("x")
    if out:
        p, _ = _run(hostile, Path(out.replace("FILE", str(tmp_path / "FILE"))), requests=1)
    else:  # '' would be the current directory: refused, nothing written there
        p, _ = cli("--base-url", hostile, "--model", "m", "--requests", "1", "--out", "")
    _one_line(p, needle)
    assert not (REPO / "requests.jsonl").exists() and not (REPO / "bench.json").exists()


def test_garbage_tokenizer_is_one_line(hostile, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    p, _ = _run(hostile, tmp_path / "o", "--tokenizer", str(bad))
    _one_line(p, "--tokenizer")


@pytest.mark.parametrize("name,content", [
    ("bench.json", "[1, 2]"),
    ("bench.json", '{"endpoint": "x", "profile": 3}'),
    ("bench.json", "[" * 100_000),
    ("summary.json", "7"),
    ("summary.json", '[{"concurrency": "a"}]'),
    ("summary.json", '[{"concurrency": [1]}, {"rate": {}}]'),
])
def test_corrupt_files_on_resume_are_one_line(hostile, tmp_path, name, content):
    _Handler.mode = "normal"
    out = tmp_path / "o"
    p, _ = _run(hostile, out, requests=1)
    assert p.returncode == 0, p.stderr
    (out / name).write_text(content)
    p, _ = _run(hostile, out, "--resume", requests=1)
    _one_line(p, name)


def test_rate_auto_with_start_above_max_is_refused(hostile, tmp_path):
    p, _ = cli("--base-url", hostile, "--model", "m", "--rate", "auto", "--rate-start", "300",
               "--rate-max", "1", "--requests", "1", "--out", str(tmp_path / "o"))
    _one_line(p, "--rate-start")
    assert not (tmp_path / "o").exists()
