"""Image Builder component documents: the shape the service requires, and clean shell.

Every bash script a component runs is extracted, its {{ Parameter }} references replaced with a
sample value, and passed through shellcheck, like the scripts under userdata/ and ami/scripts/.
No CDK here: these tests read files only.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = sorted((ROOT / "ami" / "components").glob("*.yaml"))
# Component step actions of the AWSTOE document schema (Linux and cross-platform).
KNOWN_ACTIONS = {
    "ExecuteBash", "ExecuteBinary", "ExecuteDocument", "CreateFile", "CreateFolder", "CopyFile",
    "CopyFolder", "MoveFile", "MoveFolder", "DeleteFile", "DeleteFolder", "ListFiles", "ReadFile",
    "SetFileOwner", "SetFolderOwner", "SetFilePermissions", "SetFolderPermissions", "S3Download",
    "S3Upload", "WebDownload", "Reboot", "UpdateOS", "Assert",
}
PHASES = {"build", "validate", "test"}
STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
PARAM_REF = re.compile(r"\{\{\s*([A-Za-z0-9_.:-]+)\s*\}\}")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def scripts(doc: dict):
    """(phase, step, bash text) of every ExecuteBash command block."""
    for phase in doc["phases"]:
        for step in phase["steps"]:
            if step["action"] == "ExecuteBash":
                yield phase["name"], step["name"], "\n".join(step["inputs"]["commands"])


def test_there_are_component_documents():
    names = {p.name for p in COMPONENTS}
    assert {"python-uv.yaml", "vllm-cuda.yaml", "vllm-sm75-build.yaml", "vllm-sm75-gpu-test.yaml",
            "neuron-engine.yaml"} <= names


@pytest.mark.parametrize("path", COMPONENTS, ids=lambda p: p.name)
def test_document_shape(path):
    # Inline component data (CloudFormation ``Data``) is limited to 16,000 characters; the Neuron
    # engine's keeps 3,000 free for the next change (its logic lives in ami/scripts/neuron-*.sh).
    assert len(path.read_text()) <= (13000 if path.name == "neuron-engine.yaml" else 16000)
    doc = load(path)
    assert isinstance(doc.get("name"), str) and doc["name"].startswith("inference-kit-")
    assert str(doc.get("schemaVersion")) == "1.0"
    assert doc.get("description")
    phases = doc.get("phases")
    assert isinstance(phases, list) and phases
    seen_phases = [p["name"] for p in phases]
    assert set(seen_phases) <= PHASES and len(seen_phases) == len(set(seen_phases))
    for phase in phases:
        names = [s.get("name") for s in phase["steps"]]
        assert len(names) == len(set(names)), f"duplicate step names in {phase['name']}"
        for step in phase["steps"]:
            assert STEP_NAME.match(step["name"]), step["name"]
            assert step["action"] in KNOWN_ACTIONS, step["action"]
            assert "inputs" in step
            if "timeoutSeconds" in step:
                assert 1 <= step["timeoutSeconds"] <= 43200
            if step["action"] == "ExecuteBash":
                cmds = step["inputs"]["commands"]
                assert isinstance(cmds, list) and all(isinstance(c, str) for c in cmds)
            if step["action"] == "S3Download":
                assert all({"source", "destination"} <= set(i) for i in step["inputs"])


@pytest.mark.parametrize("path", COMPONENTS, ids=lambda p: p.name)
def test_every_parameter_used_is_declared_and_every_declared_one_used(path):
    doc = load(path)
    declared = {k for p in doc.get("parameters", []) for k in p}
    used = set(PARAM_REF.findall(path.read_text()))
    assert used <= declared, f"undeclared: {used - declared}"
    assert declared <= used, f"unused: {declared - used}"
    for p in doc.get("parameters", []):
        (spec,) = p.values()
        assert spec["type"] == "string" and spec.get("description")


@pytest.mark.parametrize("path", COMPONENTS, ids=lambda p: p.name)
def test_embedded_bash_passes_shellcheck(path, tmp_path):
    shellcheck = require_binary(str(ROOT / ".venv" / "bin" / "shellcheck")) \
        if (ROOT / ".venv" / "bin" / "shellcheck").exists() else require_binary("shellcheck")
    doc = load(path)
    found = list(scripts(doc))
    assert found, "no ExecuteBash steps"
    for phase, step, text in found:
        # Image Builder substitutes {{ Name }} before bash runs; a word stands in for it here.
        body = PARAM_REF.sub("PARAM", text)
        f = tmp_path / f"{phase}-{step}.sh"
        f.write_text("#!/bin/bash\n" + body + "\n")
        r = subprocess.run([shellcheck, "-S", "style", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, f"{path.name} {phase}/{step}:\n{r.stdout}{r.stderr}"
        assert body.lstrip().startswith("set -euo pipefail"), f"{path.name} {phase}/{step} must fail fast"


def test_standalone_scripts_pass_shellcheck():
    sc = ROOT / ".venv" / "bin" / "shellcheck"
    shellcheck = str(sc) if sc.exists() else require_binary("shellcheck")
    files = sorted((ROOT / "ami" / "scripts").glob("*.sh"))
    assert files
    r = subprocess.run([shellcheck, "-S", "style", *map(str, files)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
