"""harness/run/weights.py: what each endpoint served, read where each backend keeps it.

The EC2 record comes over the tunnel's SSH connection (a stand-in forwarder registered as the
tunnel behind the endpoint's URL; tests/harness/test_access.py runs the real one), a server's from
its GET /v1/models entry, SageMaker's from its stack output; the record the boot script writes
(userdata/lib.sh kit_record_model, run here) has the digest kit/weights.py computes.
"""
from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.run import weights
from harness.access.tunnel import registered
from harness.endpoint import Endpoint
from kit.weights import DIGEST_FILES, SERVED_RECORD, file_digest

ROOT = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef" * 2 + "01234567"
RECORD = {"model": "google/gemma-4-E2B-it", "revision": SHA, "how": "pinned", "digest": "d" * 64,
          "files": ["config.json", "tokenizer.json"], "package_manifest": None}


class Forwarder:
    def __init__(self, status: int, out: bytes):
        self.status, self.out, self.commands = status, out, []

    def run_remote(self, command: str, **_):
        self.commands.append(command)
        return self.status, self.out


def ec2(name="g5g", url="http://127.0.0.1:1/v1") -> Endpoint:
    return Endpoint(name, "openai", "google/gemma-4-E2B-it", service="ec2", base_url=url, instance_id="i-1",
                    port=8000, model_revision=SHA)


def test_an_ec2_backend_is_read_over_the_tunnels_ssh_connection():
    fwd = Forwarder(0, json.dumps(RECORD).encode())
    ep = ec2()
    with registered(ep.base_url, fwd):
        w = weights.served(ep)
    assert fwd.commands == [f"cat {SERVED_RECORD}"]
    assert (w["model"], w["revision"], w["how"], w["digest"], w["pinned"]) == (
        "google/gemma-4-E2B-it", SHA, "pinned", "d" * 64, SHA)
    assert w["precision"] == "fp16" and w["source"] == f"instance {SERVED_RECORD}" and "error" not in w


@pytest.mark.parametrize("status,out,error", [
    (1, b"", "not read (exit 1)"), (0, b"{not json", "not JSON"),
    (0, json.dumps({**RECORD, "revision": "main", "digest": "xyz"}).encode(), "ignored malformed revision, digest")])
def test_an_unreadable_or_malformed_record_is_an_error_line(status, out, error):
    ep = ec2()
    with registered(ep.base_url, Forwarder(status, out)):
        w = weights.served(ep)
    assert error in w["error"] and "revision" not in w


def _server(models: dict):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = json.dumps(models).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_a_server_reports_its_weights_in_v1_models():
    srv = _server({"object": "list", "data": [{"id": "tiny", "weights": {"model": "tiny", "digest": "e" * 64,
                                                                         "how": "local"}}]})
    try:
        ep = Endpoint("demo", "openai", "tiny", base_url=f"http://127.0.0.1:{srv.server_port}/v1")
        w = weights.served(ep)
    finally:
        srv.shutdown()
    assert (w["digest"], w["source"], w["how"]) == ("e" * 64, "GET /v1/models", "local")


def test_a_server_without_weights_is_not_recorded():
    srv = _server({"object": "list", "data": [{"id": "m"}]})
    try:
        w = weights.served(Endpoint("x", "openai", "m", base_url=f"http://127.0.0.1:{srv.server_port}/v1"))
    finally:
        srv.shutdown()
    assert w["error"] == "not recorded by this server"


def test_sagemaker_reports_the_commit_it_was_given_and_bedrock_another_model():
    sm = Endpoint("sagemaker", "sagemaker", "google/gemma-4-E2B-it-qat-w4a16-ct", service="sagemaker",
                  endpoint_name="e", model_revision=SHA)
    w = weights.served(sm)
    assert (w["revision"], w["how"], w["precision"]) == (SHA, "configured", "w4a16")
    w = weights.served(Endpoint("sagemaker", "sagemaker", "package:emb4", service="sagemaker", endpoint_name="e",
                                model_revision="unpinned"))
    assert w["model"] == "google/gemma-4-E2B-it-qat-q4_0-unquantized" and "revision" not in w
    assert w["error"].startswith("unpinned") and w["pinned"] == "unpinned" and w["precision"] == "emb4"
    w = weights.served(Endpoint("bedrock", "bedrock", "us.amazon.nova-micro-v1:0", service="bedrock"))
    assert w["different_model"] is True


def test_the_boot_record_has_the_digest_the_kit_computes(tmp_path):
    """userdata/lib.sh kit_record_model, run, and kit/weights.py file_digest agree; so does sha256sum."""
    d = tmp_path / "snap"
    d.mkdir()
    for i, name in enumerate(DIGEST_FILES[:4]):
        (d / name).write_text(f"file {i}\n")
    (d / "model.safetensors").write_bytes(b"weights are not part of the digest")
    r = subprocess.run(["bash", "-c", f". {ROOT}/userdata/lib.sh; kit_record_model {d} org/m {SHA} resolved"],
                       env={"PATH": "/usr/bin:/bin", "KIT_LOG_DIR": str(tmp_path), "KIT_STATE_DIR": str(tmp_path),
                            "KIT_SERVED_RECORD": str(tmp_path / "served.json")}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "served.json").read_text())
    assert rec["digest"] == file_digest(d) and rec["files"] == list(DIGEST_FILES[:4])
    by_hand = subprocess.run(["bash", "-c", f"cd {d} && sha256sum {' '.join(DIGEST_FILES[:4])} | sha256sum"],
                             capture_output=True, text=True).stdout.split()[0]
    assert rec["digest"] == by_hand
    assert (tmp_path / "model-revision").read_text().split() == ["org/m", SHA, "resolved"]
    assert weights.from_record(rec, "x")["revision"] == SHA


def test_the_boot_script_lists_the_digest_files_kit_weights_does():
    text = (ROOT / "userdata/lib.sh").read_text()
    listed = text.split('N=[n for n in "', 1)[1].split('"', 1)[0].split()
    assert tuple(listed) == DIGEST_FILES


def test_a_package_built_from_another_commit_than_the_pin_is_refused(tmp_path):
    d = tmp_path / "pkg"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "manifest.json").write_text(json.dumps({"source": {"id": "org/src", "revision": SHA}}))
    env = {"PATH": "/usr/bin:/bin", "KIT_LOG_DIR": str(tmp_path), "KIT_STATE_DIR": str(tmp_path),
           "KIT_SERVED_RECORD": str(tmp_path / "served.json")}

    def record(pin: str):
        return subprocess.run(["bash", "-c", f". {ROOT}/userdata/lib.sh; kit_record_model {d} '' '{pin}' package "
                               f"{d}/manifest.json"], env=env, capture_output=True, text=True)

    r = record("f" * 40)
    assert r.returncode != 0 and f"package built from commit {SHA}, not the pinned {'f' * 40}" in r.stderr
    r = record("")
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "served.json").read_text())
    assert (rec["model"], rec["revision"], rec["how"]) == ("org/src", SHA, "package")
    assert len(rec["package_manifest"]) == 64
