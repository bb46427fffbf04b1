"""harness bench when nothing was measured: a closed port, a server answering every request with
an error in an HTTP 200 JSON body. Exit 3 (docs/harness.md, docs/bench.md), one line saying so with
the server's own words, every record kept; a 200 error body is recorded as the server's error
(stream_error, its message quoted), not as "empty". A level that completed nothing beside levels
that did is exit 1."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.bench import cli as bench_cli
from harness.bench.clients.openai import json_answer
from tests.bench.conftest import REPO

BODIES = {
    "plain": ({"error": "model overloaded"}, "model overloaded"),
    "openai": ({"error": {"message": "model overloaded", "type": "server_error", "code": 503}}, "model overloaded"),
    "vllm": ({"object": "error", "message": "model overloaded", "type": "ServiceUnavailable", "code": 503},
             "model overloaded"),
    "error object without message": ({"error": {"code": 7}}, '"code": 7'),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b"{}"

    def log_message(self, *a) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: every connection is refused
    return port


def _bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "bench", "--base-url", url, "--model", "m",
                           "--warmup", "0", "--profile", "10-8", "--path-probes", "0", "--quiet",
                           "--out", str(out), *extra], cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/v1", "closed"])
@pytest.mark.parametrize("levels", [["--concurrency", "1"], ["--concurrency", "1,2"], ["--rate", "50"]])
def test_a_closed_port_exits_3_says_nothing_was_measured_and_keeps_the_records(url, levels, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1" if url == "closed" else url
    out = tmp_path / "o"
    p = _bench(url, out, "--requests", "4", *levels)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("harness.bench: nothing was measured: all ") and "connect:" in p.stderr
    assert "Cannot connect to host" in p.stderr and str(out / "requests.jsonl") in p.stderr
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    n_levels = 2 if levels[1] == "1,2" else 1
    assert len(recs) == 4 * n_levels and all(r["error"] == "connect" for r in recs)
    assert json.loads((out / "summary.json").read_text())["levels"]  # the failed levels are kept too


@pytest.mark.parametrize("kind", list(BODIES))
def test_an_error_in_a_200_json_body_is_the_servers_error_with_its_message(kind, server, tmp_path):
    body, words = BODIES[kind]
    _Handler.body = json.dumps(body).encode()
    out = tmp_path / "o"
    p = _bench(server, out, "--requests", "3", "--concurrency", "1")
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("\n") == 1 and "stream_error: 3" in p.stderr and words in p.stderr, p.stderr
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 3
    for r in recs:
        assert r["error"] == "stream_error" and r["http_status"] == 200, r
        assert r["error_detail"].startswith("HTTP 200 with an error body: ") and words in r["error_detail"], r


@pytest.mark.parametrize("raw, cls, words", [
    (b'{"error": "model overloaded"}', "stream_error", "model overloaded"),
    (b'{"error": {"message": ""}}', "stream_error", '{"error"'),
    (b'{"choices": [{"message": {"content": "hi"}}]}', "empty", "ignored stream: true"),
    (b'{"id": "x"}', "protocol", "not a chat completion"),
    (b"[1, 2]", "protocol", "not a chat completion"),
    (b"not json", "protocol", "that is not JSON"),
    (b"[" * 65536, "protocol", "that is not JSON"),
    (b'{"error": ' + b"9" * 5000 + b"}", "protocol", "that is not JSON"),
    (b"\xff\xfe", "protocol", "that is not JSON"),
])
def test_json_answer_classes(raw, cls, words):
    got, detail = json_answer(raw)
    assert got == cls and words in detail


def _level(completed: int, failed: int, c: int = 1) -> dict:
    return {"concurrency": c, "completed": completed, "failed": failed,
            "errors": {"timeout": failed} if failed else {}}


@pytest.mark.parametrize("levels, rc, words", [
    ([_level(4, 0)], 0, None),
    ([_level(4, 0, 1), _level(0, 4, 64)], 1, "no request completed at c=64"),
    ([_level(0, 4, 1), _level(0, 4, 64)], 3, "nothing was measured: all 8 measured requests failed (timeout: 8)"),
])
def test_exit_code_says_what_was_measured(levels, rc, words, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_cli, "run_bench", lambda *a, **k: levels)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "bench.json").write_text("{}")
    assert bench_cli.main(["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--requests", "4",
                           "--out", str(tmp_path / "o"), "--quiet", "--resume"]) == rc
    err = capsys.readouterr().err
    assert (err == "") if words is None else (err.count("\n") == 1 and words in err), err
