"""The boot scripts: shellcheck-clean, and the shared functions (userdata/lib.sh) behave against
local stand-ins for the instance metadata service, the model server, the wait-condition handle and
shutdown."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.stacks.conftest import ROOT, SYSTEMD_PATH

SCRIPTS = sorted((ROOT / "userdata").glob("*.sh")) + sorted((ROOT / "ami").rglob("*.sh"))


def run_bash(args: list[str], env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run bash in its own process group and kill the whole group on timeout, so a script that
    hangs or forks cannot outlive the test."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        try:  # nothing the script started may survive it (e.g. a stray background job)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_every_script_is_shellcheck_clean():
    shellcheck = require_binary(str(ROOT / ".venv/bin/shellcheck"))
    assert any(p.name == "boot.sh" for p in SCRIPTS)
    r = subprocess.run([shellcheck, "-s", "bash", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


class Stand:
    """What a local HTTP server answers, set per test."""

    def __init__(self):
        self.ttl: str | None = None
        self.idle: str | None = "1"  # the kit-idle-stop-minutes instance tag
        self.metrics = ""
        self.chat_status = 200
        self.chat_body: dict = {"choices": [{"message": {"role": "assistant", "content": "ready"}}]}
        self.requests: list[str] = []
        self.signals: list[dict] = []  # wait-condition signals: the JSON bodies PUT to the handle
        self.signal_ctype: list[str | None] = []


@pytest.fixture
def stand():
    state = Stand()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, body: str, ctype="text/plain"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self):
            state.requests.append("PUT " + self.path)
            if self.path.startswith("/waitcondition/"):
                state.signal_ctype.append(self.headers.get("Content-Type"))
                state.signals.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                return self._send(200, "")
            ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            self._send(200 if ok else 400, "imds-token")

        def do_GET(self):
            state.requests.append("GET " + self.path)
            if self.path.startswith("/latest/"):
                if self.headers.get("X-aws-ec2-metadata-token") != "imds-token":
                    return self._send(401, "IMDSv2 token required")
                if self.path == "/latest/meta-data/tags/instance/kit-ttl-expires-epoch" and state.ttl:
                    return self._send(200, state.ttl)
                if self.path == "/latest/meta-data/tags/instance/kit-idle-stop-minutes" and state.idle:
                    return self._send(200, state.idle)
                if self.path == "/latest/meta-data/instance-id":
                    return self._send(200, "i-0123456789abcdef0")
                return self._send(404, "not found")
            if self.path == "/health":
                return self._send(200, "")
            if self.path == "/metrics":
                return self._send(200, state.metrics)
            self._send(404, "")

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            state.requests.append("POST " + self.path + " " + body["model"])
            self._send(state.chat_status, json.dumps(state.chat_body), "application/json")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.port = server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


def signal_url(stand: Stand) -> str:
    """A stand-in for the presigned wait-condition handle URL (its query string included)."""
    return f"http://127.0.0.1:{stand.port}/waitcondition/arn%3Aaws%3Acloudformation/ReadyHandle?X-Amz-Signature=abc&X-Amz-Expires=86399"


def run_lib(stand: Stand, tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    """Source lib.sh with every outside effect replaced by a local stand-in, then run ``script``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    variables = {
        "KIT_LOG_DIR": str(tmp_path / "log"), "KIT_STATE_DIR": str(tmp_path / "state"),
        "KIT_IMDS_URL": f"http://127.0.0.1:{stand.port}", "KIT_PORT": str(stand.port),
        "KIT_SERVED_MODEL": "google/gemma-4-E2B-it", "KIT_REGION": "us-east-1",
        "KIT_STACK": "G6Stack", "KIT_SIGNAL_URL": signal_url(stand), "KIT_HF_SECRET": "inference-kit/hf-token",
        **env,
    }
    prelude = "".join(f"{k}={json.dumps(v)}\n" for k, v in variables.items())
    text = f"""set -euo pipefail
PATH={bindir}:$PATH
{prelude}mkdir -p "$KIT_LOG_DIR" "$KIT_STATE_DIR"
. {ROOT}/userdata/lib.sh
shutdown() {{ echo "shutdown $*" >> {tmp_path}/shutdown; }}
systemctl() {{ echo "${{RESTARTS:-0}}"; }}
ss() {{ cat {tmp_path}/conns 2>/dev/null || true; }}
{script}
"""
    return run_bash(["bash", "-c", text], timeout=60)


def test_chat_completion_must_really_answer(stand, tmp_path):
    assert run_lib(stand, tmp_path, "kit_chat_ok").returncode == 0
    assert "POST /v1/chat/completions google/gemma-4-E2B-it" in stand.requests
    stand.chat_body = {"choices": [{"message": None}]}
    assert run_lib(stand, tmp_path, "kit_chat_ok").returncode != 0
    stand.chat_body = {"choices": [{"message": {"role": "assistant", "content": " "}}]}
    assert run_lib(stand, tmp_path, "kit_chat_ok").returncode != 0  # an empty reply is no answer
    stand.chat_body = {"choices": [{"message": {"role": "assistant", "content": None,
                                                "tool_calls": [{"id": "1", "type": "function"}]}}]}
    assert run_lib(stand, tmp_path, "kit_chat_ok").returncode == 0
    stand.chat_status, stand.chat_body = 500, {"error": "model not loaded"}
    assert run_lib(stand, tmp_path, "kit_chat_ok").returncode != 0


def test_wait_ready_needs_health_and_a_completion(stand, tmp_path):
    r = run_lib(stand, tmp_path, 'kit_wait_ready $(( $(date +%s) + 30 )) && echo READY')
    assert r.stdout.strip().endswith("READY") and "GET /health" in stand.requests
    stand.chat_status = 503
    r = run_lib(stand, tmp_path, 'kit_wait_ready $(( $(date +%s) - 1 )) || echo NOT-READY')
    assert "not ready before the deadline" in r.stdout and "NOT-READY" in r.stdout


def test_wait_ready_gives_up_on_a_crash_looping_engine(stand, tmp_path):
    r = run_lib(stand, tmp_path, 'kit_wait_ready $(( $(date +%s) + 600 )) || echo GAVE-UP', RESTARTS="3")
    assert "engine restarted 3 times" in r.stdout and "GAVE-UP" in r.stdout


def test_activity_counter_sums_served_running_and_waiting(stand, tmp_path):
    stand.metrics = "\n".join([
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        'vllm:request_success_total{finished_reason="stop",model_name="m"} 7.0',
        'vllm:request_success_total{finished_reason="length",model_name="m"} 2.0',
        'vllm:num_requests_running{model_name="m"} 1.0',
        'vllm:num_requests_waiting{model_name="m"} 3.0',
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5',
    ])
    assert run_lib(stand, tmp_path, "kit_activity_counter").stdout.strip() == "13"


def test_guard_stops_at_the_ttl_even_before_ready(stand, tmp_path):
    stand.ttl = str(int(time.time()) - 5)
    r = run_lib(stand, tmp_path, "kit_guard")
    assert r.returncode == 0 and "TTL reached" in r.stdout
    assert (tmp_path / "shutdown").read_text() == "shutdown -h now\n"


def test_guard_does_not_count_provisioning_as_idle(stand, tmp_path):
    stand.ttl = str(int(time.time()) + 3600)
    run_lib(stand, tmp_path, "kit_guard")
    assert not (tmp_path / "shutdown").exists()


def test_guard_stops_after_idle_minutes_and_not_while_busy(stand, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "ready").touch()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    stand.metrics = "vllm:request_success_total 4.0\n"
    two_minutes_ago = int(time.time()) - 120
    # Same boot, same counter, no connection for two minutes: idle (tag: 1 minute).
    (state / "idle").write_text(f"{boot} 4 {two_minutes_ago}\n")
    r = run_lib(stand, tmp_path, "kit_guard")
    assert "no requests for 1 minutes; stopping" in r.stdout
    assert (tmp_path / "shutdown").exists()
    (tmp_path / "shutdown").unlink()
    # A request was served since the last check: activity, no stop.
    stand.metrics = "vllm:request_success_total 5.0\n"
    (state / "idle").write_text(f"{boot} 4 {two_minutes_ago}\n")
    run_lib(stand, tmp_path, "kit_guard")
    assert not (tmp_path / "shutdown").exists()
    assert (state / "idle").read_text().split()[1] == "5"
    # A connection open on the model port (a long stream): activity, no stop.
    (state / "idle").write_text(f"{boot} 5 {two_minutes_ago}\n")
    (tmp_path / "conns").write_text("ESTAB 0 0 127.0.0.1:8000 127.0.0.1:50000\n")
    run_lib(stand, tmp_path, "kit_guard")
    assert not (tmp_path / "shutdown").exists()
    # After a stop/start (new boot id) the idle clock restarts instead of stopping at once.
    (tmp_path / "conns").unlink()
    (state / "idle").write_text(f"previous-boot 5 {two_minutes_ago}\n")
    run_lib(stand, tmp_path, "kit_guard")
    assert not (tmp_path / "shutdown").exists()
    # Idle stop turned off by the tag (a redeploy with idle_stop_minutes=0): never stops.
    stand.idle = "0"
    (state / "idle").write_text(f"{boot} 5 {two_minutes_ago}\n")
    run_lib(stand, tmp_path, "kit_guard")
    assert not (tmp_path / "shutdown").exists()


def test_failure_reason_is_one_line_without_tokens(stand, tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    (log / "boot.log").write_text("step 1\nfetching with hf_AbCdEfGhIjKlMnOpQrStUv\n")
    (log / "engine.log").write_text("".join(f"engine line {i}\n" for i in range(200)) + "OSError: gated repo\n")
    out = run_lib(stand, tmp_path, "kit_failure_reason").stdout
    assert "\n" not in out.strip() and len(out) <= 900
    assert "hf_AbCd" not in out and "OSError: gated repo" in out


def test_signal_carries_the_reason_and_is_sent_once(stand, tmp_path):
    r = run_lib(stand, tmp_path, 'kit_signal 1 "engine died: CUDA OOM \\"quoted\\""; kit_signal 0 ready')
    assert r.returncode == 0, r.stderr
    # One PUT to the presigned handle, the documented wait-condition body, no Content-Type (the
    # presigned signature covers an empty one).
    assert stand.signals == [{"Status": "FAILURE", "Reason": 'engine died: CUDA OOM "quoted"',
                              "UniqueId": "i-0123456789abcdef0", "Data": 'engine died: CUDA OOM "quoted"'}]
    assert stand.signal_ctype == [None]
    assert f"PUT {signal_url(stand).split(str(stand.port), 1)[1]}" in stand.requests


def test_a_failed_signal_is_not_recorded_as_sent(stand, tmp_path):
    r = run_lib(stand, tmp_path, "kit_signal 0 ready", KIT_SIGNAL_URL=f"http://127.0.0.1:{stand.port}/nope",
                KIT_SIGNAL_RETRIES="1")
    assert r.returncode != 0 and not (tmp_path / "state/signalled").exists()


def recording_aws(tmp_path: Path, exit_code: int = 0) -> Path:
    """An `aws` stand-in on the scripts' PATH that records each call, one argument per line."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    aws = tmp_path / "bin" / "aws"
    aws.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" >> {tmp_path}/aws.calls; echo --- >> {tmp_path}/aws.calls\n'
                   f"exit {exit_code}\n")
    aws.chmod(0o755)
    return tmp_path / "aws.calls"


def aws_calls(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [c.strip("\n").split("\n") for c in path.read_text().split("---\n") if c.strip()]


def test_the_instance_also_signals_its_creation_policy(stand, tmp_path):
    """Gate 1 (stacks/inference_instance.py): SignalResource on the instance's own logical id;
    on failure the UniqueId (at most 64 characters, botocore ResourceSignalUniqueId) carries the
    instance id and the end of the reason."""
    calls = recording_aws(tmp_path)
    reason = "step 1 ok " * 20 + "engine died: CUDA out of memory"
    r = run_lib(stand, tmp_path, f'kit_signal 1 "{reason}"', KIT_SIGNAL_RESOURCE="ServerInstanceABCD1234")
    assert r.returncode == 0, r.stderr
    (call,) = aws_calls(calls)
    assert call[:2] == ["cloudformation", "signal-resource"]
    args = dict(zip(call[2::2], call[3::2]))
    assert args["--stack-name"] == "G6Stack" and args["--logical-resource-id"] == "ServerInstanceABCD1234"
    assert args["--status"] == "FAILURE" and args["--region"] == "us-east-1"
    uid = args["--unique-id"]
    assert len(uid) <= 64 and uid.startswith("i-0123456789abcdef0: ") and uid.endswith("CUDA out of memory")
    assert len(stand.signals) == 1 and (tmp_path / "state/signalled").exists()


def test_a_refused_resource_signal_is_retried_and_not_recorded(stand, tmp_path):
    calls = recording_aws(tmp_path, exit_code=254)
    r = run_lib(stand, tmp_path, "kit_signal 0 ready", KIT_SIGNAL_RESOURCE="ServerInstanceABCD1234",
                KIT_SIGNAL_RETRIES="2", KIT_RETRY_DELAY_S="0")
    assert r.returncode != 0 and not (tmp_path / "state/signalled").exists()
    assert len(aws_calls(calls)) == 2
    # Run again once the API answers: the handle is not signalled a second time.
    recording_aws(tmp_path)
    (tmp_path / "aws.calls").unlink()
    r = run_lib(stand, tmp_path, "kit_signal 0 ready", KIT_SIGNAL_RESOURCE="ServerInstanceABCD1234")
    assert r.returncode == 0, r.stderr
    assert len(stand.signals) == 1 and aws_calls(tmp_path / "aws.calls")[0][-1] == "SUCCESS"


def test_an_expired_handle_does_not_keep_the_creation_policy_waiting(stand, tmp_path):
    """A wait-condition handle URL is presigned for 86399 s (X-Amz-Expires in the URL Ref returns;
    cloudformation-coverage-roadmap#1842: the expiry is not configurable). An instance replaced a
    day later (new AMI, same user data) gets 403 from it: its creation policy must still get the
    signal, or the update waits out the timeout and rolls back."""
    calls = recording_aws(tmp_path)
    r = run_lib(stand, tmp_path, "kit_signal 0 ready", KIT_SIGNAL_URL=f"http://127.0.0.1:{stand.port}/expired",
                KIT_SIGNAL_RESOURCE="ServerInstanceABCD1234", KIT_SIGNAL_RETRIES="1")
    assert r.returncode == 0, r.stdout + r.stderr
    (call,) = aws_calls(calls)
    assert call[:2] == ["cloudformation", "signal-resource"] and call[-1] == "SUCCESS"
    assert (tmp_path / "state/signalled").exists() and not (tmp_path / "state/signalled-handle").exists()


def test_token_fetch_is_silent_on_failure(stand, tmp_path):
    (tmp_path / "bin").mkdir()
    aws = tmp_path / "bin" / "aws"
    aws.write_text('#!/bin/bash\necho "AccessDenied for $*" >&2\nexit 254\n')
    aws.chmod(0o755)
    r = run_lib(stand, tmp_path, 'tok=$(kit_hf_token); echo "[$tok]"')
    assert r.stdout.strip() == "[]" and r.stderr == ""
    aws.write_text('#!/bin/bash\n[ "$5" = "--secret-id" ] && [ "$6" = inference-kit/hf-token ] && echo hf_secret\n')
    assert run_lib(stand, tmp_path, "kit_hf_token").stdout.strip() == "hf_secret"


TEST_ENGINE = """# shellcheck shell=bash
engine_install() { echo "engine_install ran" ; [ -z "${FAIL_INSTALL:-}" ] || { echo "pip: no matching distribution"; return 1; }; }
engine_exec() { echo "token=${HF_TOKEN:+set} model=$KIT_MODEL port=$KIT_PORT" > "$KIT_STATE_DIR/exec"; }
"""


def boot(stand: Stand, tmp_path: Path, command: str, **env: str) -> subprocess.CompletedProcess:
    """Run userdata/boot.sh for real in a scratch root: systemctl, aws and apt-get are
    recording stand-ins on PATH, the stand-in HTTP server plays the model server and IMDS."""
    bindir, lib, units = tmp_path / "bin", tmp_path / "lib", tmp_path / "systemd"
    for d in (bindir, lib, units):
        d.mkdir(exist_ok=True)
    stubs = {
        "systemctl": f'echo "$*" >> {tmp_path}/systemctl.calls; [ "$1" = show ] && echo 0; exit 0',
        "aws": f'printf "%s\\n" "$@" >> {tmp_path}/aws.calls; echo --- >> {tmp_path}/aws.calls; '
               '[ "$1" = secretsmanager ] && echo hf_TESTTOKEN1234567890abcdef; exit 0',
        "apt-get": f'echo "$*" >> {tmp_path}/apt.calls',
        "unzip": "exit 0",
    }
    for name, body in stubs.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(0o755)
    (lib / "lib.sh").write_text((ROOT / "userdata/lib.sh").read_text())
    (lib / "engine.sh").write_text(TEST_ENGINE)
    (tmp_path / "kit.env").write_text(
        f"KIT_BACKEND=g6\nKIT_MODEL=google/gemma-4-E2B-it\nKIT_SERVED_MODEL=google/gemma-4-E2B-it\n"
        f"KIT_PORT={stand.port}\nKIT_REGION=us-east-1\nKIT_STACK=G6Stack\nKIT_SIGNAL_URL='{signal_url(stand)}'\nKIT_SIGNAL_RESOURCE=ServerInstanceABCD1234\n"
        f"KIT_HF_SECRET=inference-kit/hf-token\nKIT_READY_TIMEOUT_S=${{KIT_READY_TIMEOUT_S:-30}}\n")
    variables = {
        "PATH": f"{bindir}:{SYSTEMD_PATH}", "KIT_ENV_FILE": str(tmp_path / "kit.env"), "KIT_LIB_DIR": str(lib),
        "KIT_SYSTEMD_DIR": str(units), "KIT_LOG_DIR": str(tmp_path / "log"), "KIT_STATE_DIR": str(tmp_path / "state"),
        "KIT_IMDS_URL": f"http://127.0.0.1:{stand.port}", **env,  # no HOME, as under systemd
    }
    return run_bash(["bash", str(ROOT / "userdata/boot.sh"), command], env=variables, timeout=90)


def test_provision_starts_the_unit_waits_for_an_answer_and_signals_success(stand, tmp_path):
    r = boot(stand, tmp_path, "provision")
    assert r.returncode == 0, r.stdout + r.stderr
    unit = (tmp_path / "systemd/kit-engine.service").read_text()
    assert "ExecStart=/usr/local/bin/kit-boot serve" in unit and "Restart=on-failure" in unit
    assert f"StandardOutput=append:{tmp_path}/log/engine.log" in unit
    assert "OnUnitActiveSec=1min" in (tmp_path / "systemd/kit-guard.timer").read_text()
    calls = (tmp_path / "systemctl.calls").read_text().splitlines()
    assert ["daemon-reload", "enable --now kit-guard.timer", "enable kit-engine.service",
            "restart kit-engine.service"] == [c for c in calls if not c.startswith("show")]
    assert "POST /v1/chat/completions google/gemma-4-E2B-it" in stand.requests
    assert (tmp_path / "state/ready").exists()
    assert [(x["Status"], x["UniqueId"]) for x in stand.signals] == [("SUCCESS", "i-0123456789abcdef0")]
    (signal,) = [c for c in aws_calls(tmp_path / "aws.calls") if c[:2] == ["cloudformation", "signal-resource"]]
    assert signal[-4:] == ["--unique-id", "i-0123456789abcdef0", "--status", "SUCCESS"]
    # Missing tools come from apt, waiting for the first-boot dpkg lock (this machine lacks the
    # EC2 Instance Connect package the harness logs in through).
    apt = (tmp_path / "apt.calls").read_text()
    assert "-o DPkg::Lock::Timeout=600 install -y -q" in apt and "ec2-instance-connect" in apt
    log = (tmp_path / "log/boot.log").read_text()
    assert "engine_install ran" in log and "ready: /health and one chat completion answered" in log
    # Run again (as after a reboot): no second signal, same result.
    assert boot(stand, tmp_path, "provision").returncode == 0
    assert len(stand.signals) == 1
    assert sum(c[:2] == ["cloudformation", "signal-resource"] for c in aws_calls(tmp_path / "aws.calls")) == 1


def test_provision_failure_signals_the_log_tail(stand, tmp_path):
    r = boot(stand, tmp_path, "provision", FAIL_INSTALL="1")
    assert r.returncode != 0
    (sig,) = stand.signals
    assert sig["Status"] == "FAILURE" and "pip: no matching distribution" in sig["Reason"]
    (signal,) = [c for c in aws_calls(tmp_path / "aws.calls") if c[:2] == ["cloudformation", "signal-resource"]]
    assert signal[-1] == "FAILURE"
    assert not (tmp_path / "state/ready").exists()
    calls = tmp_path / "systemctl.calls"
    assert not calls.exists() or "restart kit-engine.service" not in calls.read_text()


def test_provision_signals_failure_when_the_model_never_answers(stand, tmp_path):
    stand.chat_status = 500
    r = boot(stand, tmp_path, "provision", KIT_READY_TIMEOUT_S="0")
    assert r.returncode != 0
    (sig,) = stand.signals
    assert sig["Status"] == "FAILURE" and "not ready before the deadline" in sig["Reason"]


def test_serve_exports_the_token_without_logging_it(stand, tmp_path):
    (tmp_path / "state").mkdir()
    r = boot(stand, tmp_path, "serve")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "state/exec").read_text().strip() == \
        f"token=set model=google/gemma-4-E2B-it port={stand.port}"
    assert "hf_TEST" not in r.stdout + r.stderr


@pytest.mark.parametrize("backend, itype, tokens", [("inf2", "inf2.xlarge", 4096), ("trn1", "trn1.32xlarge", 8192)])
def test_neuron_engine_receives_the_planners_shapes_as_they_are(tmp_path, backend, itype, tokens):
    """engine-neuron.sh's engine_exec, run: it fetches the checkpoint once and starts the engine
    with the stack's KIT_* variables for the planner's compile (kit/fit.py neuron_compile: degrees,
    platform, TP degree, batch, total tokens, prompt buckets), deciding nothing itself."""
    from kit.fit import neuron_compile
    from stacks.ec2_backend import neuron_boot_env

    from tests.stacks.hf_stand_in import NEWEST, fake_hf

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    calls = tmp_path / "calls"
    fake_hf(venv / "hf", calls)
    (venv / "kit-neuron-serve").write_text(f'#!/bin/bash\necho "serve $*" >> {calls}\n')
    (venv / "kit-neuron-serve").chmod(0o755)
    model = "google/gemma-4-E2B-it"
    nc = neuron_compile(backend, itype, model, tokens)
    env = {"PATH": SYSTEMD_PATH, "KIT_MODEL": model, "KIT_SERVED_MODEL": model, "KIT_PORT": "8000",
           **neuron_boot_env(nc), "KIT_NEURON_VENV": str(tmp_path / "venv"), "KIT_LOG_DIR": str(tmp_path),
           "KIT_STATE_DIR": str(tmp_path), "KIT_SERVED_RECORD": str(tmp_path / "served.json")}
    script = (ROOT / "userdata/engine-neuron.sh").read_text().replace("/opt/inference-kit/models", str(tmp_path / "m")) \
        .replace("/opt/inference-kit/hf", str(tmp_path / "hf"))
    (tmp_path / "engine.sh").write_text(script)
    for _ in range(2):  # a second start (reboot, stop/start) reuses the checkpoint and its commit
        r = run_bash(["bash", "-c", f"set -euo pipefail; . {ROOT}/userdata/lib.sh; . {tmp_path}/engine.sh; "
                      "engine_exec"], env=env)
        assert r.returncode == 0, r.stderr
    resolve, hf, serve1, serve2 = calls.read_text().splitlines()
    # unpinned: the newest commit, resolved once (refs/main), then downloaded at that commit
    assert resolve == f"hf download {model} config.json"
    assert hf == f"hf download {model} --revision {NEWEST} --local-dir {tmp_path}/m/{model}"
    assert json.loads((tmp_path / "served.json").read_text())["revision"] == NEWEST
    assert serve1 == serve2 == (f"serve --model {tmp_path}/m/{model} --served-model-name {model} --host 127.0.0.1 "
                                f"--port 8000 {' '.join(nc.engine_args())}")
    if backend == "trn1":  # 32 NeuronCores, 8 heads: the planner's degree is 8, not the catalog's largest
        assert "--tp-degree 8 " in serve1 and "--max-total-tokens 8192 --prompt-buckets 128,512,2048,4096" in serve1


def test_every_flag_the_boot_script_passes_is_one_the_engine_takes():
    """engine-neuron.sh and ami/neuron/cli.py agree on the engine's command line."""
    import re

    from ami.neuron.cli import build_parser

    script = (ROOT / "userdata/engine-neuron.sh").read_text()
    exec_line = script[script.index('exec "$KIT_NEURON_SERVE"'):].split("\n}", 1)[0]
    passed = set(re.findall(r"(--[a-z][a-z-]+)", exec_line))
    known = {o for a in build_parser()._actions for o in a.option_strings}
    assert {"--tp-degrees", "--platform", "--tp-degree", "--batch-size", "--max-total-tokens",
            "--prompt-buckets"} <= passed and passed <= known, passed - known
