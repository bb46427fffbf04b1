"""The command line: bad input is one line and a non-zero exit; the package runs from an
installed copy of the directory; the kit's lean side never imports the engine."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(args, cwd=REPO, pythonpath=REPO):
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([sys.executable, "-m", "ami.neuron.server", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, says", [
    ([], "the following arguments are required: --device"),
    (["--device", "gpu"], "invalid choice: 'gpu'"),
    (["--device", "neuron", "--tiny-random"], "--tiny-random needs --device cpu"),
    (["--device", "cpu"], "--model DIR is required with --device cpu (or --tiny-random)"),
    (["--device", "cpu", "--model", "/nonexistent"], "'/nonexistent' is not a checkpoint directory"),
    (["--device", "cpu", "--tiny-random", "--port", "70000"], "port must be 1..65535"),
    (["--device", "cpu", "--tiny-random", "--prompt-buckets", "512,128"], "increasing positive integers"),
    (["--device", "cpu", "--tiny-random", "--prompt-buckets", "128,a"], "comma-separated integers"),
    (["--device", "cpu", "--tiny-random", "--max-total-tokens", "128", "--prompt-buckets", "128"],
     "must exceed the largest prompt bucket"),
    (["--device", "cpu", "--tiny-random", "--batch-size", "0"], "positive integer"),
    (["--device", "cpu", "--tiny-random", "--tp-degrees", "1,x"], "comma-separated integers"),
    (["--device", "cpu", "--tiny-random", "--compile-only"], "--compile-only needs --device neuron"),
    (["--device", "cpu", "--tiny-random", "--model", "x"], "either --model DIR or --tiny-random"),
    (["--device", "cpu", "--tiny-random", "--header-timeout", "nan"], "seconds in 0.1..3600, got 'nan'"),
    (["--device", "cpu", "--tiny-random", "--body-timeout", "0"], "seconds in 0.1..3600, got '0'"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    r = run_cli(args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("python -m ami.neuron.server: error:")


def test_int4_dtype_is_refused_before_anything_loads(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    r = run_cli(["--device", "neuron", "--model", str(tmp_path), "--dtype", "int4"])
    assert r.returncode == 2 and "27x slower" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_neuron_generator_without_the_sdk_says_so(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    r = run_cli(["--device", "neuron", "--model", str(tmp_path)])
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "python -m ami.neuron.server: error: neuronx_distributed_inference is not installed; the "
        "neuron generator runs on the Neuron image (use --device cpu elsewhere)"]


def test_unreadable_checkpoint_is_one_line(tmp_path):
    # In-process (the subprocess path is the same main()): saves a second transformers import.
    from ami.neuron.server import main

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(["--device", "cpu", "--model", str(tmp_path), "--cpu-threads", "1", "--log-level", "error"])
    message = e.value.code  # a str: Python prints it to stderr and exits with status 1
    assert isinstance(message, str) and "\n" not in message
    assert message.startswith(f"python -m ami.neuron.server: error: cannot load --model '{tmp_path}': ")


def test_runs_from_an_installed_copy_of_the_directory(tmp_path):
    """What the image does: copy ami/__init__.py and ami/neuron/ elsewhere and run the module."""
    dest = tmp_path / "site" / "ami"
    shutil.copytree(REPO / "ami" / "neuron", dest / "neuron",
                    ignore=shutil.ignore_patterns("__pycache__", "README.md"))
    shutil.copy(REPO / "ami" / "__init__.py", dest / "__init__.py")
    r = run_cli(["--help"], cwd=tmp_path, pythonpath=tmp_path / "site")
    assert r.returncode == 0, r.stderr
    for flag in ("--device", "--model", "--tiny-random", "--host", "--port", "--prompt-buckets",
                 "--max-total-tokens", "--batch-size", "--dtype", "--tp-degree", "--tp-degrees", "--platform",
                 "--compiled-dir"):
        assert flag in r.stdout
    # The chat template file travels with the package (read with importlib.resources).
    probe = subprocess.run([sys.executable, "-c", "import ami.neuron.tiny as t, ami.neuron.server as s; "
                            "print(t.__file__); print(t.chat_template().count('<|tool>'))"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    where, count = probe.stdout.split()
    assert where.startswith(str(tmp_path)) and int(count) >= 1


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_imports_nothing_from_the_repo_outside_its_package():
    for path in (REPO / "ami" / "neuron").glob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in ("harness", "stacks", "tests")
               or (n.startswith("ami") and not n.startswith("ami.neuron"))}
        assert not bad, f"{path.name} imports {bad}"


def harness_imports_of_ami(root: Path = REPO) -> list[str]:
    """Every import of ``ami`` or anything under it in harness/, lazy imports included."""
    return [f"{path.relative_to(root)} imports {n}" for path in sorted((root / "harness").rglob("*.py"))
            for n in sorted(_imports(path)) if n == "ami" or n.startswith("ami.")]


def test_harness_never_imports_the_engine_and_the_kit_install_stays_lean():
    """ami/ is image payload: the Neuron engine and its build scripts. The harness reads none of
    it; what the planner must apply exactly as the engine will (shapes, tensor-parallel rules) is
    restated in kit/fit.py and held to the engine by tests/kit/test_plan.py. So the lean install
    (requirements.txt, no torch) never needs the engine."""
    assert harness_imports_of_ami() == []
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert {n.split(".")[0] for n in _imports(REPO / "kit" / "pins.py")} <= stdlib
    kit = (REPO / "requirements.txt").read_text().lower()
    assert "torch" not in kit and "transformers" not in kit
    engine = (REPO / "requirements-engine.txt").read_text()
    assert "torch==" in engine and "transformers==" in engine


def test_the_harness_rule_sees_a_lazy_import_of_the_engine(tmp_path):
    """The oracle: a harness module that imports ami.neuron inside a function, one that imports
    the bare package, and one that only names it in a string are told apart."""
    (tmp_path / "harness" / "sub").mkdir(parents=True)
    (tmp_path / "harness" / "a.py").write_text("def f():\n    from ami.neuron import neuron_config\n")
    (tmp_path / "harness" / "sub" / "b.py").write_text("import ami\n")
    (tmp_path / "harness" / "c.py").write_text("CMD = ['python', '-m', 'ami.neuron.server']\nimport amiga\n")
    assert harness_imports_of_ami(tmp_path) == ["harness/a.py imports ami.neuron",
                                                "harness/sub/b.py imports ami"]


def test_port_in_use_is_one_line_before_the_model_loads():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli(["--device", "cpu", "--tiny-random", "--port", str(port)])
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0]
