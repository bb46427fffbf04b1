"""The reference paced server (harness.bench.refserver) as a fixture: one process per test
module on 127.0.0.1, reconfigured per test through POST /control, stopped when the module ends."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DEFAULTS = {"ttft_ms": 60.0, "itl_ms": 5.0, "tokens_per_chunk": 1, "usage": "vllm",
            "role_chunk": True, "output_tokens": 0, "fault": "none", "fault_every": 0,
            "drop_after": 4, "record": True}


class RefServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.bench.refserver", "--port", "0"],
                                     stdout=subprocess.PIPE, text=True, cwd=REPO)
        line = self.proc.stdout.readline()
        assert "listening on" in line, line
        self.url = line.split()[-1]
        self.base_url = self.url + "/v1"

    def call(self, method: str, path: str, body=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def configure(self, **settings) -> None:
        self.call("POST", "/control", {**DEFAULTS, **settings})
        self.call("DELETE", "/records")

    def records(self) -> dict[str, dict]:
        return {r["id"]: r for r in self.call("GET", "/records")}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def refserver():
    srv = RefServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ref(refserver):
    refserver.configure()
    return refserver
