"""Neuron scripts run under the environment they get on the instance and on the build host.

cloud-init's scripts, the kit's systemd units and the Image Builder agent (itself a systemd
service) get systemd's default PATH and no login profile: /opt/aws/neuron/bin, where
aws-neuronx-tools installs neuron-ls, is not on it (aws-neuron/aws-neuron-sdk#447, "neuron-ls:
command not found", answered with `export PATH=/opt/aws/neuron/bin:$PATH`). cloud-init exports no
HOME to user-data scripts (osism/cloud-in-a-box#135 "cloud-init has no $HOME",
angristan/openvpn-install#1492). Each script here runs with `env -i`, that PATH and no HOME;
fake tools sit in a temp root standing for / at the paths the real ones have, so a script that
calls a tool by bare name fails.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kit import pins
from tests.stacks.test_neuron_install import SYSTEMD_PATH, agent_env, render, stack_parameters, step_script

ROOT = Path(__file__).resolve().parents[2]
USERDATA = ROOT / "userdata"
# Tools aws-neuronx-tools installs in /opt/aws/neuron/bin (Neuron tools user guide).
NEURON_TOOLS = ("neuron-ls", "neuron-top", "neuron-monitor", "neuron-profile")


def fake_tool(path: Path, body: str = "echo fake \"$0\" \"$@\"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", "-c", script], env=agent_env(**env), capture_output=True,
                          text=True, timeout=60)


def test_the_environment_is_systemds_without_home_or_profile():
    r = run('command -v neuron-ls || echo "no neuron-ls"; echo "HOME=${HOME:-unset}"; echo "PATH=$PATH"')
    assert r.stdout.splitlines() == ["no neuron-ls", "HOME=unset", f"PATH={SYSTEMD_PATH}"], r.stdout
    assert pins.NEURON_TOOLS_BIN not in SYSTEMD_PATH.split(":")


def engine_install(tmp_path: Path, with_tool: bool) -> subprocess.CompletedProcess:
    """userdata/engine-neuron.sh's engine_install as kit-boot runs it under cloud-init."""
    venv = tmp_path / "opt/inference-kit/neuron"
    fake_tool(venv / "bin/kit-neuron-serve")
    tools = tmp_path / pins.NEURON_TOOLS_BIN.lstrip("/")
    if with_tool:
        fake_tool(tools / "neuron-ls")
    script = (f"set -euo pipefail; . {USERDATA}/lib.sh; . {USERDATA}/engine-neuron.sh; "
              "engine_install")
    return run(script, KIT_MODEL="google/gemma-4-E2B-it", KIT_NEURON_VENV=str(venv),
               KIT_NEURON_TOOLS=str(tools), KIT_LOG_DIR=str(tmp_path / "log"), KIT_STATE_DIR=str(tmp_path / "state"))


def test_engine_install_finds_neuron_ls_where_the_sdk_puts_it(tmp_path):
    r = engine_install(tmp_path, with_tool=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Neuron engine found in the image" in r.stdout


def test_engine_install_refuses_an_image_without_neuron_ls(tmp_path):
    r = engine_install(tmp_path, with_tool=False)
    assert r.returncode == 1
    assert "build the neuron image first" in r.stdout


def test_engine_script_defaults_to_the_sdk_tools_dir():
    text = (USERDATA / "engine-neuron.sh").read_text()
    assert f"KIT_NEURON_TOOLS=${{KIT_NEURON_TOOLS:-{pins.NEURON_TOOLS_BIN}}}" in text


def devices_step(root: Path, script: str) -> subprocess.CompletedProcess:
    fake_tool(root / pins.NEURON_TOOLS_BIN.lstrip("/") / "neuron-ls")
    # The venv's python: reads the heredoc and answers like the real one would.
    fake_tool(root / "opt/inference-kit/neuron/bin/python", "cat >/dev/null; echo torch 2.9.0 torch-neuronx fake")
    params = {**stack_parameters(), "NeuronToolsBin": str(root / pins.NEURON_TOOLS_BIN.lstrip("/"))}
    return run(render(script, params, root))


def test_image_test_step_calls_neuron_ls_by_path(tmp_path):
    r = devices_step(tmp_path / "root", step_script("test", "NeuronDevices"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fake" in r.stdout and "neuron-ls" in r.stdout


def test_a_bare_name_call_fails_in_this_environment(tmp_path):
    """The check above can fail: the same step calling neuron-ls by bare name does."""
    script = step_script("test", "NeuronDevices").replace('"{{ NeuronToolsBin }}/neuron-ls"', "neuron-ls")
    assert script != step_script("test", "NeuronDevices")
    r = devices_step(tmp_path / "root", script)
    assert r.returncode == 127 and "neuron-ls" in r.stderr


def instance_and_build_scripts() -> list[tuple[str, str]]:
    """(name, bash text) of every script that runs on an instance or an image build host."""
    import yaml

    found = [(p.name, p.read_text()) for p in sorted(USERDATA.glob("*.sh"))]
    found += [(p.name, p.read_text()) for p in sorted((ROOT / "ami" / "scripts").glob("*.sh"))]
    for comp in sorted((ROOT / "ami" / "components").glob("*.yaml")):
        for phase in yaml.safe_load(comp.read_text())["phases"]:
            for step in phase["steps"]:
                if step["action"] == "ExecuteBash":
                    found.append((f"{comp.name}:{phase['name']}/{step['name']}", "\n".join(step["inputs"]["commands"])))
    return found


@pytest.mark.parametrize("name,text", instance_and_build_scripts(), ids=lambda v: v if isinstance(v, str) and len(v) < 80 else "")
def test_no_script_calls_a_neuron_tool_by_bare_name(name, text):
    for lineno, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        for tool in NEURON_TOOLS:
            # A bare call: the tool's name at a command position, not after a '/'.
            if re.search(rf"(^|[;&|(`]|\$\(|\bthen|\bdo|\bexec)\s*{re.escape(tool)}\b", code) or \
                    re.search(rf"command -v {re.escape(tool)}\b", code):
                pytest.fail(f"{name}:{lineno} calls {tool} by bare name: {line.strip()}")


# --- the launcher: the compiler it runs must be found -----------------------------------------
# NxD Inference compiles through libneuronxla and torch-neuronx, which run the compiler as a
# subprocess by bare name: libneuronxla's neuron_cc_wrapper.call_neuron_compiler builds
# `cmd = ["neuronx-cc", "compile", f"--framework={framework}", ...]` (as a DLAMI installs it),
# torch-neuronx's xla_impl/trace.py looks it up with distutils' spawn.find_executable. Both
# search PATH. The Neuron DLC for SDK 2.28 puts its Python's bin on PATH (aws-neuron/
# deep-learning-containers 033cc6a, pytorch/inference/2.9.0/Dockerfile.neuronx:
# `ENV PATH=/opt/conda/bin:/opt/aws/neuron/bin:$PATH`); aws-neuron/aws-neuron-sdk#737
# ("RuntimeError: neuronx-cc compiler binary does not exist" from a Python whose environment's
# bin was not on PATH) was answered by running the right environment and checking `neuronx-cc -V`.

def launcher(root: Path) -> Path:
    """The kit-neuron-serve the InstallEngine step writes, under root."""
    step = step_script("build", "InstallEngine")
    body = step.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    path = root / "opt/inference-kit/neuron/bin/kit-neuron-serve"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(body, stack_parameters(), root) + "\n")
    path.chmod(0o755)
    return path


def test_the_launcher_runs_the_engine_with_the_venvs_compiler_on_path(tmp_path):
    root = tmp_path / "root"
    venv_bin = root / "opt/inference-kit/neuron/bin"
    compiler = fake_tool(venv_bin / "neuronx-cc")
    # The venv's python stands for the engine: it looks the compiler up as libneuronxla does.
    fake_tool(venv_bin / "python", 'command -v neuronx-cc || echo "neuronx-cc not on PATH"; '
                                   'echo "NEURON_LOGICAL_NC_CONFIG=$NEURON_LOGICAL_NC_CONFIG"')
    r = subprocess.run([str(launcher(root)), "--compile-only"], env=agent_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [str(compiler), "NEURON_LOGICAL_NC_CONFIG=1"], r.stdout
