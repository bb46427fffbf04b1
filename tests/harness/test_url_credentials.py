"""Credentials in an --endpoint (or the bench's --base-url) URL.

``http://user:TOKEN@host/v1`` is sent to host with HTTP Basic authentication (it was resolved as a
host name and failed with a DNS error), and the secret appears in no output and no file: every
line the commands print and every file under their output directories is scanned for the token,
for its percent-encoded spelling and for the Basic header value.
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from aiohttp import web

from tests.harness.fake_openai import SCRIPTS, FakeOpenAI
from tests.conftest import saved_levels
from tests.harness.servers import free_port

REPO = Path(__file__).resolve().parents[2]

# (case, user, password): each is put into the URL percent-encoded, as RFC 3986 says
CREDENTIALS = [
    ("user and token", "kit", "sk-TOKEN-9f8e7d6c5b4a"),
    ("token only, as the user", "sk-TOKEN-1a2b3c4d5e6f", ""),
    ("characters that need escaping", "a@b", "TOK:EN/9?#x%y"),
]


def agent_or_answer(body: dict, n: int) -> dict:
    """The agent trial streams (a tool call, then the quote); harness.accuracy asks for a whole reply."""
    return SCRIPTS["good"](body, n) if body.get("stream") else {"text": "Answer: 2"}


class AuthOpenAI(FakeOpenAI):
    """The fake server behind a check that answers 401 without the right Basic credentials."""

    def __init__(self, user: str, password: str, *a, **kw) -> None:
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.seen: list[str | None] = []

        @web.middleware
        async def check(req: web.Request, handler):
            self.seen.append(req.headers.get("Authorization"))
            if req.headers.get("Authorization") != self.expected:
                return web.json_response({"error": {"message": "unauthorized"}}, status=401)
            return await handler(req)

        super().__init__(*a, middlewares=[check], **kw)


def _url(port: int, user: str, password: str) -> str:
    q = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
    return f"http://{q(user)}{':' + q(password) if password else ''}@127.0.0.1:{port}/v1"


def _secrets(user: str, password: str) -> list[str]:
    secret = password or user
    pair = f"{user}:{password}"
    return [secret, urllib.parse.quote(secret, safe=""), base64.b64encode(pair.encode()).decode()]


def _scan(texts: list[str], roots: list[Path], secrets: list[str]) -> None:
    for t in texts:
        for s in secrets:
            assert s not in t, f"{s!r} printed: {t[:2000]}"
    files = [f for r in roots if r.exists() for f in r.rglob("*") if f.is_file()]
    assert files, "nothing was written to scan"
    for f in files:
        data = f.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s!r} stored in {f}"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=180)


def _items(tmp_path: Path) -> Path:
    p = tmp_path / "items.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}: 1+1?", "answer": "2"}) + "\n"
                         for i in range(3)))
    return p


@pytest.mark.parametrize("case, user, password", CREDENTIALS, ids=[c[0] for c in CREDENTIALS])
def test_harness_accuracy_sends_basic_auth_and_never_shows_the_secret(tmp_path, case, user, password):
    with AuthOpenAI(user, password, agent_or_answer) as srv:
        out = tmp_path / "out"
        p = _run("-m", "harness.accuracy", "--endpoint", "a=" + _url(srv.port, user, password),
                 "--items", str(_items(tmp_path)), "--out", str(out))  # no --model: probed with the credentials
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert srv.seen and set(srv.seen) == {srv.expected}
        assert len(srv.requests) == 3
    _scan([p.stdout, p.stderr], [out], _secrets(user, password))


@pytest.mark.parametrize("case, user, password", CREDENTIALS, ids=[c[0] for c in CREDENTIALS])
def test_harness_run_agent_and_accuracy_send_basic_auth_and_store_no_secret(tmp_path, case, user, password):
    with AuthOpenAI(user, password, agent_or_answer) as srv:
        results = tmp_path / "results"
        p = _run("-m", "harness.run", "--endpoint", "a=" + _url(srv.port, user, password), "--only",
                 "agent,accuracy,report", "--runs", "1", "--accuracy-items", str(_items(tmp_path)),
                 "--results", str(results), "--json", str(tmp_path / "summary.json"))
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert srv.seen and set(srv.seen) == {srv.expected}
    [run] = list(results.iterdir())
    meta = json.loads((run / "meta.json").read_text())
    assert meta["stages"]["agent"].startswith("ok (1/1") and meta["stages"]["accuracy"].startswith("ok")
    _scan([p.stdout, p.stderr], [results, tmp_path / "summary.json"], _secrets(user, password))


@pytest.mark.parametrize("case, user, password", CREDENTIALS[:1], ids=[c[0] for c in CREDENTIALS[:1]])
def test_the_bench_sends_basic_auth_and_saves_no_secret(tmp_path, case, user, password):
    with AuthOpenAI(user, password, agent_or_answer) as srv:
        out = tmp_path / "bench"
        p = _run("-m", "harness.bench", "--base-url", _url(srv.port, user, password), "--concurrency", "1",
                 "--requests", "2", "--warmup", "0", "--path-probes", "0", "--out", str(out), "--quiet")
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert srv.seen and set(srv.seen) == {srv.expected}
    assert saved_levels(out / "summary.json")[0]["completed"] == 2
    _scan([p.stdout, p.stderr], [out], _secrets(user, password))


@pytest.mark.parametrize("argv", [
    ["-m", "harness.accuracy", "--endpoint", "a={url}", "--model", "m", "--items", "{items}", "--out", "{out}"],
    ["-m", "harness.accuracy", "--endpoint", "a={url}", "--items", "{items}", "--out", "{out}"],
    ["-m", "harness.run", "--endpoint", "a={url}", "--only", "agent,accuracy", "--runs", "1",
     "--accuracy-items", "{items}", "--results", "{out}"],
    ["-m", "harness.accuracy", "--endpoint", "bad name={url}", "--items", "{items}", "--out", "{out}"],
    ["-m", "harness.run", "--endpoint", "bad name={url}", "--results", "{out}"],
    ["-m", "harness.bench", "--base-url", "{url}", "--requests", "1", "--out", "{out}"],
    ["-m", "harness.bench", "--base-url", "{url}", "--model", "m", "--requests", "1", "--path-probes", "0",
     "--concurrency", "1", "--out", "{out}", "--quiet"],
], ids=["accuracy", "accuracy-probe", "run", "accuracy-bad-name", "run-bad-name", "bench-probe", "bench"])
def test_a_server_that_is_not_there_is_reported_without_the_secret(tmp_path, argv):
    user, password = "kit", "sk-TOKEN-deadbeef"
    url = _url(free_port(), user, password)
    out = tmp_path / "out"
    p = _run(*[a.format(url=url, items=_items(tmp_path), out=out) for a in argv])
    # harness.run records a dead endpoint and goes on; the bench records every request as failed
    assert p.returncode != 0 or argv[1] in ("harness.run", "harness.bench"), (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert "Name or service not known" not in p.stderr + p.stdout  # no longer resolved as a host
    for s in _secrets(user, password):
        assert s not in p.stdout + p.stderr
        for f in (out.rglob("*") if out.exists() else []):
            if f.is_file():
                assert s.encode() not in f.read_bytes(), f
