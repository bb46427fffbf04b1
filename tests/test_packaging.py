"""The kit as a package: pyproject's extras are the requirement files the Makefile installs (one
list of pins, two ways in), setuptools can read them (no -r/-c lines), every package the kit
imports is found, and the one door (`python -m harness COMMAND`) reaches every command."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _dynamic():
    return PYPROJECT["tool"]["setuptools"]["dynamic"]


def test_extras_are_the_requirement_files_the_makefile_installs():
    dyn = _dynamic()
    assert dyn["dependencies"]["file"] == ["requirements.txt"]
    extras = dyn["optional-dependencies"]
    makefile = (ROOT / "Makefile").read_text()
    dev_install = re.search(r"\$\(STAMP_DEV\):.*?\n((?:\t.*\n)+)", makefile).group(1)
    dev_files = re.findall(r"-r (\S+)", dev_install)
    assert sorted(dev_files) == sorted(["requirements.txt", *extras["dev"]["file"]])
    for name in ("engine", "package", "accuracy"):
        assert extras[name]["file"][0] in extras["dev"]["file"]


@pytest.mark.parametrize("req", sorted(p.name for p in ROOT.glob("requirements*.txt")))
def test_requirement_files_are_exact_pins_setuptools_can_read(req):
    """setuptools reads these as the extras' lists: comments and requirements only."""
    for line in (ROOT / req).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert not line.startswith("-"), f"{req}: {line!r}: setuptools cannot read option lines"
            assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z0-9_,\-]+\])?==[0-9][A-Za-z0-9.\-+]*", line), \
                f"{req}: {line!r} is not an exact pin"


def test_the_packages_found_are_the_kits_layers():
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]))
    assert {"kit", "harness", "harness.bench", "stacks", "stacks.lambdas", "ami", "ami.neuron"} <= found
    assert not {p for p in found if p.startswith("tests")}


def test_the_console_script_is_the_one_door():
    assert PYPROJECT["project"]["scripts"]["inference-kit"] == "harness.__main__:main"


def test_every_command_resolves_to_a_callable():
    import importlib

    from harness.__main__ import COMMANDS

    for name, (target, _) in COMMANDS.items():
        module, _, func = target.partition(":")
        assert callable(getattr(importlib.import_module(module), func)), name


def _door(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_the_door_lists_commands_and_refuses_an_unknown_one_in_one_line():
    r = _door()
    assert r.returncode == 0 and "run " in r.stdout and "preflight " in r.stdout
    r = _door("deploy-everything")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "'deploy-everything'" in r.stderr and "valid: run" in r.stderr


def test_a_command_behind_the_door_gets_its_arguments():
    r = _door("report", "--help")
    assert r.returncode == 0 and "usage: python -m harness report" in r.stdout
