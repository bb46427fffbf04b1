"""The Neuron image compiles the inf2 backend's model in, with the arguments an inf2 boot passes,
so the boot finds graphs with the same cache key and loads without compiling.

Shown three ways: the synthesized image parameters equal the synthesized Inf2Stack's kit.env;
the component's PrecompileModel step, run under the agent's environment (env -i, systemd's PATH,
no HOME) with fake hf and launcher at their real paths, puts the checkpoint where
userdata/engine-neuron.sh looks and calls the launcher with those arguments; the image test's
smoke script, run against a stand-in server, passes only when the engine reused its graphs.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.stacks.test_ec2_backends import kit_env, user_data
from tests.stacks.test_images import COMPONENT_NAMES, IMAGE_STACKS, _by_name, _recipe_components
from tests.stacks.test_neuron_install import agent_env, render, stack_parameters, step_script
from tests.stacks.hf_stand_in import NEWEST, fake_hf
from tests.stacks.test_neuron_install_env import fake_tool

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "ami" / "scripts" / "neuron-smoke-completion.sh"


def image_params(kit) -> dict[str, str]:
    recipe = _by_name(kit, IMAGE_STACKS["neuron"], "AWS::ImageBuilder::ImageRecipe")["inference-kit-neuron-build"]
    return _recipe_components(kit, IMAGE_STACKS["neuron"], recipe)[COMPONENT_NAMES["neuron-engine.yaml"]]


def inf2_env(kit) -> dict[str, str]:
    (instance,) = kit.resources("Inf2Stack", "AWS::EC2::Instance").values()
    return {k: v.strip("'") for k, v in kit_env(user_data(instance)).items()}


def test_the_image_compiles_what_the_inf2_boot_asks_for(kit):
    p, env = image_params(kit), inf2_env(kit)
    assert p["PrecompileModel"] == env["KIT_MODEL"] == env["KIT_SERVED_MODEL"]
    # the compiled shapes, both from kit/fit.py neuron_compile
    assert p["CompileArgs"].split() == [
        "--tp-degrees", env["KIT_TP_DEGREES"], "--platform", env["KIT_NEURON_PLATFORM"],
        "--tp-degree", env["KIT_NEURON_TP_DEGREE"], "--batch-size", env["KIT_NEURON_BATCH_SIZE"],
        "--max-total-tokens", env["KIT_MAX_MODEL_LEN"], "--prompt-buckets", env["KIT_NEURON_PROMPT_BUCKETS"]]
    assert p["CompileArgs"] == ("--tp-degrees 1,2 --platform inf2 --tp-degree 2 --batch-size 4 --max-total-tokens 4096 "
                                "--prompt-buckets 128,512,2048")
    assert p["HfTokenSecret"] == kit.config.hf_token_secret


def test_image_and_boot_give_the_engine_the_same_shape_flags(kit, tmp_path):
    """Both scripts run: the image's PrecompileModel step with the synthesized image parameters, and
    userdata/engine-neuron.sh's engine_exec with the synthesized Inf2Stack's kit.env; each calls a
    stand-in launcher that records its arguments. Every flag that enters the engine's cache key
    (ami/neuron/neuron_config.py cache_key: shapes, TP degree, platform) is the same in both, and is
    kit/fit.py's neuron_compile for the configured model on inf2.xlarge."""
    from kit.fit import neuron_compile
    from tests.stacks.conftest import SYSTEMD_PATH

    from stacks.images import NEURON_COMPILE_PARAMETERS

    synthesized = image_params(kit)
    r, root = run_precompile(tmp_path / "image", **{k: synthesized[k] for k in NEURON_COMPILE_PARAMETERS})
    assert r.returncode == 0, r.stdout + r.stderr
    image = (root / "launcher-args").read_text().split("\n")[:-1]
    env = inf2_env(kit)
    venv = tmp_path / "boot/venv/bin"
    fake_hf(venv / "hf", tmp_path / "boot-hf-calls")
    fake_tool(venv / "kit-neuron-serve", f'printf "%s\\n" "$@" > {tmp_path}/boot-args')
    script = (ROOT / "userdata/engine-neuron.sh").read_text().replace(
        "/opt/inference-kit/models", str(tmp_path / "boot/m")).replace("/opt/inference-kit/hf", str(tmp_path / "boot/hf"))
    (tmp_path / "engine.sh").write_text(script)
    r = subprocess.run(["/bin/bash", "-c", f"set -euo pipefail; . {ROOT}/userdata/lib.sh; . {tmp_path}/engine.sh; "
                        "engine_exec"],
                       env={**env, "PATH": SYSTEMD_PATH, "KIT_NEURON_VENV": str(tmp_path / "boot/venv"),
                            "KIT_LOG_DIR": str(tmp_path), "KIT_STATE_DIR": str(tmp_path),
                            "KIT_SERVED_RECORD": str(tmp_path / "served.json")},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    boot = (tmp_path / "boot-args").read_text().split("\n")[:-1]

    def shapes(args: list[str]) -> list[str]:
        keyed = ("--tp-degrees", "--platform", "--tp-degree", "--batch-size", "--max-total-tokens", "--prompt-buckets")
        return [x for i, a in enumerate(args) if a in keyed for x in (a, args[i + 1])]

    want = neuron_compile("inf2", "inf2.xlarge", env["KIT_MODEL"], kit.config.max_model_len).engine_args()
    assert shapes(image) == shapes(boot) == want
    assert image[image.index("--served-model-name") + 1] == boot[boot.index("--served-model-name") + 1]


def test_no_precompile_when_inf2_is_not_selected_or_on_another_type():
    from kit.config import KNOWN_KEYS, parse
    from stacks.images import neuron_precompile
    from tests.stacks.conftest import CDK_CONTEXT

    base = {k: v for k, v in CDK_CONTEXT.items() if k in KNOWN_KEYS}
    assert neuron_precompile(parse({**base, "backends": "trn1"}))["PrecompileModel"] == "none"
    assert neuron_precompile(parse({**base, "inf2_instance_type": "inf2.24xlarge"}))["PrecompileModel"] == "none"
    assert neuron_precompile(parse(base))["PrecompileModel"] != "none"


def run_precompile(tmp_path: Path, **override: str) -> tuple[subprocess.CompletedProcess, Path]:
    root = tmp_path / "root"
    venv_bin = root / "opt/inference-kit/neuron/bin"
    (root / "etc/inference-kit").mkdir(parents=True)
    # hf writes a checkpoint as huggingface_hub lays it out (tests/stacks/hf_stand_in.py); the
    # launcher records its arguments.
    fake_hf(venv_bin / "hf", tmp_path / "hf-calls")
    fake_tool(venv_bin / "kit-neuron-serve", f'printf "%s\\n" "$@" > {root}/launcher-args')
    params = {**stack_parameters(), "HfTokenSecret": "none", **override}
    r = subprocess.run(["/bin/bash", "-c", render(step_script("build", "PrecompileModel"), params, root)],
                       env=agent_env(), capture_output=True, text=True, timeout=60)
    return r, root


def test_precompile_step_leaves_the_checkpoint_where_the_boot_looks_and_compiles_with_its_arguments(tmp_path):
    params = stack_parameters()
    model = params["PrecompileModel"]
    r, root = run_precompile(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # userdata/engine-neuron.sh: KIT_MODEL_DIR=/opt/inference-kit/models/$KIT_MODEL, skipped when complete.
    engine = (ROOT / "userdata" / "engine-neuron.sh").read_text()
    assert "KIT_MODEL_DIR=/opt/inference-kit/models/$KIT_MODEL" in engine and ".kit-complete" in engine
    ckpt = root / "opt/inference-kit/models" / model
    assert (ckpt / ".kit-complete").exists() and (ckpt / "config.json").exists()
    # unpinned: the newest commit, downloaded and written beside the checkpoint for the boot to report
    assert (ckpt / ".kit-revision").read_text().strip() == NEWEST
    assert f"kit-model-revision {model} {NEWEST}" in r.stdout
    args = (root / "launcher-args").read_text().split("\n")
    assert args[:-1] == ["--model", f"{root}/opt/inference-kit/models/{model}", "--served-model-name", model,
                         *params["CompileArgs"].split(), "--compile-only"]
    # The boot's launch carries the same served name (and the launcher's own --compiled-dir, the
    # same file in the image and on the instance); the shapes: test_image_and_boot_give_...
    assert '--served-model-name "$KIT_SERVED_MODEL"' in engine
    assert (root / "etc/inference-kit/precompiled-model").read_text().strip() == model


def test_precompile_step_does_nothing_without_a_model(tmp_path):
    r, root = run_precompile(tmp_path, PrecompileModel="none")
    assert r.returncode == 0 and "first boot downloads and compiles" in r.stdout
    assert not (root / "launcher-args").exists()


STAND_IN = textwrap.dedent(r'''
    import json, os, re, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    print("reusing compiled model in /cache" if "--cached" in args else "compiling for {} into /cache", flush=True)

    def tokens(text):
        # As Gemma's tokenizer cuts "1, 2, 3,": <bos>, then every digit and every comma alone.
        return ["<bos>"] + re.findall(r"\d|,", text)

    def completion(body):
        # A model that counts on from the last number it sees; with --sees-511, one that sees the
        # prompt only up to position 511 (the sliding-window bug the image test is there to catch).
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "completions.json"), "a") as f:
            f.write(json.dumps(body) + "\n")
        if "--refuses" in args:
            return 400, {"error": {"message": "stop sequences are not supported by this engine",
                                   "type": "invalid_request_error", "param": "stop", "code": None}}
        seen = tokens(body["prompt"])
        if "--sees-511" in args:
            seen = seen[:511]
        last = int(re.findall(r"(\d+),", "".join(seen[1:]))[-1])
        text = " " + ", ".join(str(last + i) for i in range(1, 13)) + ","
        prompt_tokens = 600 if "--short-prompt" in args else len(tokens(body["prompt"]))
        return 200, {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                     "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 64}}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            # /health as the engine answers it: the largest prompt bucket (--max-prompt N: smaller)
            largest = int(args[args.index("--max-prompt") + 1]) if "--max-prompt" in args else 2048
            self.send_response(200); self.end_headers()
            self.wfile.write(json.dumps({"status": "ok", "limits": {"max_prompt_tokens": largest}}).encode())
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code = 200
            if self.path == "/v1/completions":
                code, reply = completion(body)
            else:
                reply = {"choices": [{"message": {"content": "Paris (" + body["model"] + ")"}}]}
            out = json.dumps(reply).encode()
            self.send_response(code); self.send_header("Content-Type", "application/json"); self.end_headers()
            self.wfile.write(out)
    HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.mark.parametrize("cached", [True, False])
def test_image_smoke_passes_only_when_the_engine_reused_its_graphs(tmp_path, cached):
    server = tmp_path / "server.py"
    server.write_text(STAND_IN)
    launcher = fake_tool(tmp_path / "kit-neuron-serve", f'exec {shlex.quote(sys.executable)} {server} "$@"')
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = ["--cached"] if cached else []
    r = subprocess.run([str(SMOKE), str(launcher), str(tmp_path / "ckpt"), "google/gemma-4-E2B-it", *extra],
                       env=agent_env(SMOKE_REQUIRE_CACHED="1", SMOKE_PORT=str(port), SMOKE_POLL="0.2",
                                     SMOKE_TIMEOUT="30"),
                       capture_output=True, text=True, timeout=60)
    if cached:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "neuron smoke completion ok: Paris (google/gemma-4-E2B-it)" in r.stdout
        assert ("neuron smoke long prompt ok: 1173 prompt tokens, continued with 321 322 323 324 325 326 327 328"
                in r.stdout), r.stdout
        assert r.stderr == ""
    else:
        assert r.returncode == 1 and "did not reuse the image's compiled graphs" in r.stderr


def test_the_log_lines_the_smoke_reads_are_the_engines():
    src = (ROOT / "ami" / "neuron" / "neuron_generator.py").read_text()
    assert '"reusing compiled model in %s"' in src


# --- one line naming what failed: compile (build phase), load or answer (test phase) -----------

def last_line(r: subprocess.CompletedProcess) -> str:
    return r.stderr.strip().splitlines()[-1]


def test_a_failed_compile_fails_the_build_with_one_line_naming_the_compile(tmp_path):
    root = tmp_path / "root"
    venv_bin = root / "opt/inference-kit/neuron/bin"
    (root / "etc/inference-kit").mkdir(parents=True)
    fake_hf(venv_bin / "hf", tmp_path / "hf-calls")
    fake_tool(venv_bin / "kit-neuron-serve", 'echo "neuronx-cc: NCC_INLA001 internal error" >&2; exit 70')
    params = {**stack_parameters(), "HfTokenSecret": "none"}
    r = subprocess.run(["/bin/bash", "-c", render(step_script("build", "PrecompileModel"), params, root)],
                       env=agent_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    line = last_line(r)
    assert line.startswith("neuron image build failed at compile: " + params["PrecompileModel"]), r.stderr
    assert "exit 70" in line and "NCC_INLA001" in r.stderr  # the compiler's own words stay above it
    assert not (root / "etc/inference-kit/precompiled-model").exists()


def test_a_failed_download_names_the_download(tmp_path):
    root = tmp_path / "root"
    (root / "etc/inference-kit").mkdir(parents=True)
    fake_tool(root / "opt/inference-kit/neuron/bin/hf", "exit 2")
    fake_tool(root / "opt/inference-kit/neuron/bin/kit-neuron-serve", "exit 0")
    params = {**stack_parameters(), "HfTokenSecret": "none"}
    r = subprocess.run(["/bin/bash", "-c", render(step_script("build", "PrecompileModel"), params, root)],
                       env=agent_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and last_line(r).startswith("neuron image build failed at download: ")


DIES = "import sys; print('neuron runtime: NRT init failed', flush=True); sys.exit(3)"
NO_TEXT = STAND_IN.replace('"Paris (" + body["model"] + ")"', '""')


@pytest.mark.parametrize("server, stage", [(DIES, "load"), (NO_TEXT, "answer")])
def test_the_image_test_names_load_or_answer_in_one_last_line(tmp_path, server, stage):
    script = tmp_path / "server.py"
    script.write_text(server)
    launcher = fake_tool(tmp_path / "kit-neuron-serve", f'exec {shlex.quote(sys.executable)} {script} "$@"')
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([str(SMOKE), str(launcher), str(tmp_path / "ckpt"), "google/gemma-4-E2B-it", "--cached"],
                       env=agent_env(SMOKE_REQUIRE_CACHED="1", SMOKE_PORT=str(port), SMOKE_POLL="0.2",
                                     SMOKE_TIMEOUT="30"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert last_line(r).startswith(f"neuron image test failed at {stage}: google/gemma-4-E2B-it from "), r.stderr


# --- the long prompt: decoding past the 512-token sliding window, checked with no reference -------

def run_smoke(tmp_path: Path, server: str, *extra: str) -> subprocess.CompletedProcess:
    """neuron-smoke-completion.sh as the image's test step runs it (agent environment), the
    launcher a stand-in that runs ``server`` with the launcher's arguments."""
    import socket
    script = tmp_path / "server.py"
    script.write_text(server)
    launcher = fake_tool(tmp_path / "kit-neuron-serve", f'exec {shlex.quote(sys.executable)} {script} "$@"')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return subprocess.run([str(SMOKE), str(launcher), str(tmp_path / "ckpt"), "google/gemma-4-E2B-it", *extra],
                          env=agent_env(SMOKE_REQUIRE_CACHED="1", SMOKE_PORT=str(port), SMOKE_POLL="0.2",
                                        SMOKE_TIMEOUT="30"),
                          capture_output=True, text=True, timeout=60)


def test_the_long_prompt_is_a_greedy_counting_prompt_the_engine_accepts(tmp_path):
    r = run_smoke(tmp_path, STAND_IN, "--cached")
    assert r.returncode == 0, r.stdout + r.stderr
    (body,) = [json.loads(line) for line in (tmp_path / "completions.json").read_text().splitlines()]
    assert body["model"] == "google/gemma-4-E2B-it"
    assert body["prompt"] == ", ".join(str(i) for i in range(1, 321)) + ","
    # Greedy and short; nothing the engine refuses (api.py: no stop sequences) and within its
    # shapes (default prompt buckets up to 2048, 4096 in all).
    assert body["temperature"] == 0 and body["max_tokens"] == 64
    assert set(body) == {"model", "prompt", "temperature", "max_tokens"}
    from ami.neuron.neuron_config import DEFAULT_SHAPES
    digits_and_commas = sum(c.isdigit() or c == "," for c in body["prompt"])
    assert 600 < digits_and_commas and digits_and_commas + 2 + 64 <= DEFAULT_SHAPES.max_prompt_tokens


def test_the_long_prompt_fits_a_smaller_largest_bucket_or_is_skipped(tmp_path):
    """-c max_model_len=2048 compiles a largest prompt bucket of 1024: the counting prompt stops
    early enough to fit it (4.7 tokens a number, 64 spare) and still passes the window; a bucket
    too small for any prompt past the window skips the check in one line."""
    r = run_smoke(tmp_path, STAND_IN, "--cached", "--max-prompt", "1024")
    assert r.returncode == 0, r.stdout + r.stderr
    (body,) = [json.loads(line) for line in (tmp_path / "completions.json").read_text().splitlines()]
    assert body["prompt"] == ", ".join(str(i) for i in range(1, 205)) + ","
    assert 600 < len(re.findall(r"\d|,| ", body["prompt"])) + 1 <= 1024 - 64
    small = tmp_path / "small"
    small.mkdir()
    r = run_smoke(small, STAND_IN, "--cached", "--max-prompt", "512")
    assert r.returncode == 0 and "long prompt skipped: the largest prompt bucket (512 tokens)" in r.stdout
    assert not (small / "completions.json").exists()


@pytest.mark.parametrize("mode, says", [
    # Sees the prompt only up to position 511 (<bos>, 1-9 in 18 tokens, 10-99 in 270, then 4
    # each): counts on from 154, the last number it saw whole.
    ("--sees-511", 'counts "155 156 157 158 159 160 161 162", expected "321 322 323 324 325 326 327 328" '
                   '(the engine wrote " 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166,")'),
    ("--short-prompt", "the long prompt is only 600 tokens (usage.prompt_tokens), not over 600"),
    ("--refuses", "the long prompt's /v1/completions reply has no usage.prompt_tokens: "
                  '{"error": {"message": "stop sequences are not supported by this engine"'),
])
def test_a_wrong_long_prompt_answer_fails_the_image_test_in_one_line(tmp_path, mode, says):
    r = run_smoke(tmp_path, STAND_IN, "--cached", mode)
    assert r.returncode == 1
    (line,) = r.stderr.splitlines()  # the only line on stderr, so the only one the build shows
    assert line.startswith("neuron image test failed at long prompt: google/gemma-4-E2B-it from "), line
    assert says in line, line
    assert "long prompt ok" not in r.stdout


@pytest.mark.slow
def test_the_long_prompt_reaches_the_real_cpu_engine(tmp_path):
    """Wiring only: the real engine (CPU, tiny random model saved as a checkpoint) takes the
    request and reports the prompt's tokens; its random weights do not count, so the image test
    fails at the long prompt, in one line with the tiny tokenizer's count of the prompt."""
    from ami.neuron import tiny
    ckpt = tmp_path / "ckpt"
    tiny.save(str(ckpt))
    prompt = ", ".join(str(i) for i in range(1, 321)) + ","
    n = len(tiny.build_tokenizer().encode(prompt, add_special_tokens=True))
    assert n > 600
    launcher = fake_tool(tmp_path / "kit-neuron-serve",
                         f"cd {ROOT} && PYTHONPATH={ROOT} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "
                         f'exec {shlex.quote(sys.executable)} -m ami.neuron.server --device cpu "$@"')
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([str(SMOKE), str(launcher), str(ckpt), "tiny", "--prompt-buckets", "128,512,2048",
                        "--max-total-tokens", "4096", "--cpu-threads", "1"],
                       env=agent_env(SMOKE_PORT=str(port), SMOKE_POLL="0.2", SMOKE_TIMEOUT="120"),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 1
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"neuron image test failed at long prompt: tiny from {ckpt}: greedy continuation "
                           f'of the {n}-token prompt "1, 2, ..., 320," counts "'), line
    assert 'expected "321 322 323 324 325 326 327 328"' in line
