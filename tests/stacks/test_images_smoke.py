"""ami/scripts/smoke-completion.sh, the image test that serves one completion, run for real
against a stand-in `vllm` executable that speaks the two endpoints the script uses, on 127.0.0.1.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.stacks.conftest import SYSTEMD_PATH

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ami" / "scripts" / "smoke-completion.sh"

FAKE_VLLM = textwrap.dedent('''\
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    state = os.environ["FAKE_STATE"]
    open(os.path.join(state, "argv"), "w").write(json.dumps(args))
    open(os.path.join(state, "pid"), "w").write(str(os.getpid()))
    mode = os.environ.get("FAKE_MODE", "ok")
    if mode == "crash":
        print("boom: CUDA error: no kernel image is available", flush=True)
        sys.exit(1)
    assert args[0] == "serve"
    host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200 if self.path == "/health" else 404, {})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            open(os.path.join(state, "request"), "w").write(json.dumps(req))
            text = "" if mode == "empty" else "Paris"
            self._send(200, {"choices": [{"message": {"role": "assistant", "content": text}}]})

    HTTPServer((host, port), H).serve_forever()
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def venv(tmp_path) -> Path:
    require_binary("jq")
    require_binary("curl")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "fake_vllm.py").write_text(FAKE_VLLM)
    launcher = bin_dir / "vllm"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir / "fake_vllm.py"}" "$@"\n')
    launcher.chmod(0o755)
    return tmp_path / "venv"


def _run(venv: Path, tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess, Path]:
    state = tmp_path / "state"
    state.mkdir()
    # As the Image Builder agent runs a step: systemd's PATH, no HOME, no login profile.
    env = {"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8", "FAKE_STATE": str(state), "FAKE_MODE": mode,
           "SMOKE_PORT": str(_free_port()), "SMOKE_POLL": "0.2", "SMOKE_TIMEOUT": "20",
           "SMOKE_HF_HOME": str(tmp_path / "hf")}
    r = subprocess.run(["bash", str(SCRIPT), str(venv), "google/gemma-4-E2B-it",
                        "--attention-backend", "TRITON_ATTN", "--dtype", "float16"],
                       env=env, capture_output=True, text=True, timeout=60)
    return r, state


def _server_gone(state: Path) -> bool:
    pid = int((state / "pid").read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_one_completion_passes_and_the_server_is_stopped(venv, tmp_path):
    r, state = _run(venv, tmp_path, "ok")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "smoke completion ok: Paris"
    argv = (state / "argv").read_text()
    assert '"--host", "127.0.0.1"' in argv and '"--attention-backend", "TRITON_ATTN"' in argv
    request = (state / "request").read_text()
    assert '"model": "google/gemma-4-E2B-it"' in request and '"max_tokens": 32' in request
    assert _server_gone(state)


def test_a_server_that_dies_fails_with_its_log(venv, tmp_path):
    r, state = _run(venv, tmp_path, "crash")
    assert r.returncode == 1
    assert "exited before it was healthy" in r.stderr and "no kernel image is available" in r.stderr


def test_an_empty_answer_fails(venv, tmp_path):
    r, state = _run(venv, tmp_path, "empty")
    assert r.returncode == 1 and "completion had no text" in r.stderr
    assert _server_gone(state)
