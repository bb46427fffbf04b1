"""The neuron image's installer resolves, offline, against the real packages' declared requirements.

tests/stacks/data/neuron_packages.json records the Requires-Dist of every package the installer
meets (PyPI metadata, NxD Inference's setup.py, the Neuron release content; the source is named
on each entry). tests/stacks/neuron_index.py turns it into local package indexes of metadata-only
wheels. The InstallEngine step of ami/components/neuron-engine.yaml is taken from the document,
given the parameters the stack gives it (stacks/images.py neuron_spec) with the three package
indexes pointed at the local ones, and run with the pinned uv under the environment the Image
Builder agent gives it: systemd's default PATH, no HOME, no login profile (env -i). The root it
installs into is a temp directory standing for /. The engine pins NxD Inference's own
transformers (4.57.6, kit/pins.py); the negative case is the transformers 5 the image installed
before, which no resolver can put next to NxD Inference's transformers==4.57.*.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit import pins
from stacks import images
from tests.stacks.neuron_index import DATA, ORIGINS, build_indexes, load_packages, normalize

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "ami" / "components" / "neuron-engine.yaml"
PARAM_REF = re.compile(r"\{\{\s*([A-Za-z0-9_.:-]+)\s*\}\}")
# systemd's default PATH for units (systemd.exec(5), "Environment variables in spawned
# processes"); the Image Builder agent and cloud-init run as such units, without a login profile.
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Absolute paths the component writes to; the test maps each under a temp root.
ROOTED = ("/opt/inference-kit", "/var/cache/inference-kit", "/etc/inference-kit", "/opt/ami")
# The engine's pins the image had before (transformers 5 with its hub and tokenizers): the negative case.
TRANSFORMERS_5 = "transformers==5.23.0 huggingface_hub==2.4.0 tokenizers==0.23.3 aiohttp==3.14.5 Jinja2==3.1.6"


def uv_binary() -> str:
    """The uv the image installs (pins.UV_VERSION), from the dev requirements."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.fail(f"uv not found: install the dev requirements (uv=={pins.UV_VERSION})")
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert version == pins.UV_VERSION, f"test uv is {version}, the image installs {pins.UV_VERSION}"
    return uv


def python_312() -> str:
    """A CPython of the image's minor version (pins.PYTHON_VERSION) if this machine has one."""
    found = shutil.which(f"python{pins.PYTHON_VERSION}")
    if found:
        real = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
        if real.returncode == 0 and real.stdout.strip():
            return real.stdout.strip()
    return sys.executable


def step_script(phase: str, step: str) -> str:
    doc = yaml.safe_load(COMPONENT.read_text())
    for p in doc["phases"]:
        for s in p["steps"]:
            if p["name"] == phase and s["name"] == step:
                return "\n".join(s["inputs"]["commands"])
    raise AssertionError(f"no step {phase}/{step} in {COMPONENT.name}")


def stack_parameters() -> dict[str, str]:
    """The parameters NeuronImageStack gives the component (as synthesized)."""
    from kit.config import parse
    from tests.stacks.conftest import CDK_CONTEXT
    from kit.config import KNOWN_KEYS

    config = parse({k: v for k, v in CDK_CONTEXT.items() if k in KNOWN_KEYS})
    (pipeline,) = images.neuron_spec(config).pipelines("s3://bucket/assets.zip")
    (use,) = [c for c in pipeline.components if c.file == COMPONENT.name]
    return dict(use.parameters)


def render(script: str, params: dict[str, str], root: Path) -> str:
    """Image Builder's {{ Name }} substitution, then every written path moved under root. The
    scripts a step runs from the unpacked assets (ami/scripts) are put where UnpackEngine leaves
    them, under root, and told the root (KIT_IMAGE_ROOT) for the paths they write."""
    missing = set(PARAM_REF.findall(script)) - set(params)
    assert not missing, f"no value for {missing}"
    text = PARAM_REF.sub(lambda m: params[m.group(1)], script)
    for path in ROOTED:
        text = text.replace(path, f"{root}{path}")
    if "/opt/inference-kit/assets/scripts/" in script:
        shutil.copytree(ROOT / "ami" / "scripts", root / "opt/inference-kit/assets/scripts", dirs_exist_ok=True)
        shutil.copytree(ROOT / "ami" / "neuron-port", root / "opt/inference-kit/assets/neuron-port", dirs_exist_ok=True)
        text = f"export KIT_IMAGE_ROOT={root}\n{text}"
    return text


def agent_env(**extra: str) -> dict[str, str]:
    """What a systemd service gets: the default PATH, nothing from a login profile, no HOME."""
    return {"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8", **extra}


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> dict[str, Path]:
    return build_indexes(tmp_path_factory.mktemp("indexes"))


def install_root(tmp_path: Path) -> Path:
    """A temp root with what the python-uv component leaves: uv at /opt/inference-kit/bin/uv."""
    root = tmp_path / "root"
    (root / "opt/inference-kit/bin").mkdir(parents=True)
    (root / "etc/inference-kit").mkdir(parents=True)
    (root / "opt/inference-kit/bin/uv").symlink_to(uv_binary())
    return root


def run_install(script: str, indexes: dict[str, Path], root: Path, **override: str) -> subprocess.CompletedProcess:
    params = {**stack_parameters(), **override, "PythonVersion": python_312(),
              "TorchIndexUrl": indexes["torch-cpu"].as_uri(), "NeuronIndexUrl": indexes["neuron"].as_uri()}
    body = render(script, params, root)
    # UV_INDEX_URL stands for PyPI, uv's default index; offline so nothing reaches a network.
    env = agent_env(UV_INDEX_URL=indexes["pypi"].as_uri(), UV_OFFLINE="1", UV_PYTHON_DOWNLOADS="never")
    return subprocess.run(["/bin/bash", "-c", body], env=env, capture_output=True, text=True, timeout=120)


def params_for_check() -> list[str]:
    p = stack_parameters()
    return p["NeuronPip"].split() + p["EnginePip"].split()


def installed(venv: Path) -> dict[str, str]:
    found = {}
    for info in venv.glob("lib/python*/site-packages/*.dist-info"):
        meta = (info / "METADATA").read_text()
        name = re.search(r"^Name: (.+)$", meta, re.M).group(1).strip()
        found[normalize(name)] = re.search(r"^Version: (.+)$", meta, re.M).group(1).strip()
    return found


# --- the recorded facts --------------------------------------------------------------------------

def test_every_recorded_package_names_its_source_and_index():
    packages = load_packages()
    assert packages
    for p in packages:
        assert p["source"] and len(p["source"]) > 20, p["name"]
        assert p["indexes"] and set(p["indexes"]) <= set(ORIGINS), p["name"]
        assert not any("extra ==" in r for r in p["requires_dist"]), p["name"]
    keys = [(normalize(p["name"]), p["version"]) for p in packages]
    assert len(keys) == len(set(keys)), "a package version is recorded twice"


def test_the_record_covers_every_pinned_package():
    recorded = {(normalize(p["name"]), p["version"]) for p in load_packages()}
    for name, version in pins.NEURON_PIP.items():
        assert (normalize(name), version) in recorded, f"{name}=={version} (kit/pins.py) is not in {DATA.name}"
    for spec in images.engine_pip_specs().split():
        name, version = spec.split("==")
        assert (normalize(name), version) in recorded, f"{spec} (engine pins) is not in {DATA.name}"
    assert (normalize("torch"), f"{pins.NEURON_TORCH_VERSION}+cpu") in recorded
    # PyPI's CUDA build is there too, as on the real default index: the installed CPU build must win.
    assert (normalize("torch"), pins.NEURON_TORCH_VERSION) in recorded
    assert (normalize("torchvision"), f"{pins.NEURON_TORCHVISION_VERSION}+cpu") in recorded
    assert (normalize("torchvision"), pins.NEURON_TORCHVISION_VERSION) in recorded  # PyPI's CUDA build


@pytest.mark.parametrize("line", list(pins.NEURON_LINES))
def test_the_engine_pins_the_transformers_nxd_inference_declares(line):
    """NxD Inference setup.py (0.8 at cd3abf3, 0.9 at c63afe0) and the 2.31 release content:
    'neuronx-distributed-inference == 4.57.*'. The engine's pin satisfies it."""
    from packaging.specifiers import SpecifierSet

    version = pins.neuron_line(line).pip["neuronx-distributed-inference"]
    nxdi = next(p for p in load_packages() if p["name"] == "neuronx-distributed-inference" and p["version"] == version)
    (want,) = [r.removeprefix("transformers") for r in nxdi["requires_dist"] if r.startswith("transformers")]
    engine = next(s for s in images.engine_pip_specs(line).split() if s.startswith("transformers=="))
    assert engine.split("==")[1] in SpecifierSet(want)


# --- the installer, run --------------------------------------------------------------------------

def test_the_component_installs_neuron_with_its_pins_then_the_transformers_override(indexes, tmp_path):
    root = install_root(tmp_path)
    r = run_install(step_script("build", "InstallEngine"), indexes, root)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    venv = root / "opt/inference-kit/neuron"
    have = installed(venv)
    for name, version in pins.NEURON_PIP.items():
        assert have.get(normalize(name)) == version, (name, have.get(normalize(name)))
    for spec in images.engine_pip_specs().split():
        name, version = spec.split("==")
        assert have.get(normalize(name)) == version, (spec, have.get(normalize(name)))
    assert have["torch"] == f"{pins.NEURON_TORCH_VERSION}+cpu"  # from the CPU index, kept
    # torchvision (NxD Inference requires it) is the CPU build too: PyPI's CUDA build cannot be
    # imported next to the CPU torch, and transformers imports it (kit/pins.py).
    assert have["torchvision"] == f"{pins.NEURON_TORCHVISION_VERSION}+cpu"
    # No conflict at all: every declared requirement holds (the step runs uv pip check itself too).
    check = subprocess.run([uv_binary(), "pip", "check", "--python", str(venv / "bin/python")],
                           capture_output=True, text=True, env=agent_env())
    assert check.returncode == 0, check.stdout + check.stderr
    # The validate step's version check (its Python part; dpkg-query needs the real apt
    # packages) accepts what was installed.
    validate = step_script("validate", "CheckPins")
    check_py = validate.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    specs = params_for_check()
    v = subprocess.run([str(venv / "bin/python"), "-", *specs], input=check_py, capture_output=True,
                       text=True, env=agent_env())
    assert v.returncode == 0, v.stdout + v.stderr
    assert len(v.stdout.splitlines()) == len(specs)
    # The launcher and the version stamp land where the unit and the validate step look.
    assert os.access(venv / "bin/kit-neuron-serve", os.X_OK)
    assert pins.NEURON_SDK in (root / "etc/inference-kit/engine-version").read_text()
    assert not (root / "opt/inference-kit/cache/uv").exists()


def test_transformers_5_cannot_be_installed_next_to_nxd_inference(indexes, tmp_path):
    r = run_install(step_script("build", "InstallEngine"), indexes, install_root(tmp_path), EnginePip=TRANSFORMERS_5)
    assert r.returncode != 0
    assert "transformers==4.57.*" in r.stderr and "unsatisfiable" in r.stderr, r.stderr[-2000:]
