"""No import cycle among the kit's product modules (kit, harness, stacks, ami, app.py), and the
layers point one way: stacks/ (and app.py) and harness/ both depend on the shared core kit/, never
on each other; kit/ depends on neither, nor on the CDK or boto3; the Neuron engine (ami/neuron)
on nothing of the kit. Inside harness/, the root holds only the vocabulary (HARNESS_ROOT) and the
packages, and the packages import as harness_rule_problems says.

The graph is read from the source with ``ast``, every import statement counted wherever it sits
(module level or inside a function: a lazy import still ties the two modules together), except
those under ``if TYPE_CHECKING:``, which never run. ``from pkg import name`` is an edge to
``pkg`` (Python runs its ``__init__`` and reads ``name`` from it) and also to ``pkg.name`` when
that is a module. ``import pkg.mod`` and ``from pkg.mod import x`` are edges to ``pkg.mod`` only:
they are not counted against the parent packages' ``__init__`` (Python runs them too, but a
package whose ``__init__`` imports its submodules would then always be a cycle).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kit", "harness", "stacks", "ami")

# Known cycles the test tolerates, each the set of modules of one cycle; empty, and meant to
# stay so: a cycle goes here only with a plan to remove it.
ALLOWED: list[frozenset[str]] = []


def module_name(path: Path) -> str:
    return module_name_in(ROOT, path)


def module_name_in(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_modules() -> dict[str, Path]:
    files = [ROOT / "app.py"] + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    return {module_name(p): p for p in files if "__pycache__" not in p.parts}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node that can run, at any depth."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def edges(name: str, path: Path, modules: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import name` runs pkg/__init__ and reads name from it: an edge to pkg, and
            # to pkg.name as well when that is a submodule.
            targets = [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
        for t in targets:
            # the longest product module the target names (import a.b.c where only a.b is ours)
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = product_modules()
    return {name: edges(name, path, set(mods)) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_the_walker_sees_lazy_relative_and_package_imports(tmp_path):
    """The oracle for the walker: a hand-made package with two cycles, one through a function
    (a <-> b), one through the package's own __init__ (the shape of harness.report's former cycle:
    __init__ imports page lazily, page reads plots from the package)."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    files = {
        "__init__.py": "def render():\n    from p.page import html\n",
        "page.py": "from p import plots\n",
        "plots.py": "",
        "a.py": "from . import b\n",
        "b.py": "def f():\n    from p.a import g\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import a\n",
        "d.py": "import p.plots\nfrom p.plots import x\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    mods = {module_name_in(tmp_path, pkg / name): pkg / name for name in files}
    graph = {n: edges(n, p, set(mods)) for n, p in mods.items()}
    assert graph == {"p": {"p.page"}, "p.page": {"p", "p.plots"}, "p.plots": set(), "p.a": {"p", "p.b"},
                     "p.b": {"p.a"}, "p.c": set(), "p.d": {"p.plots"}}
    assert sorted(map(sorted, cycles(graph))) == [["p", "p.page"], ["p.a", "p.b"]]


def test_the_graph_covers_the_product_modules():
    graph = import_graph()
    assert {"app", "kit.catalog", "kit.config", "stacks.images", "ami.neuron.neuron_config"} <= set(graph)
    assert "kit.config" in graph["app"] and "kit.catalog" in graph["kit.config"]


def test_no_import_cycle_among_product_modules():
    found = [c for c in cycles(import_graph()) if c not in ALLOWED]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


@pytest.mark.parametrize("module", ["kit.catalog", "kit.config"])
def test_plain_python_modules_do_not_reach_the_cdk(module):
    """The harness runs without aws-cdk-lib: the catalog and the config parser never import it."""
    graph = import_graph()
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    src = "\n".join((ROOT / (m.replace(".", "/") + ".py")).read_text() for m in seen
                    if (ROOT / (m.replace(".", "/") + ".py")).exists())
    assert "aws_cdk" not in src


def test_the_neuron_engine_never_reaches_the_harness():
    """The Neuron image ships ami/neuron without the harness: the engine gets the catalog's
    decisions (tp degrees, platform) on its command line, it never imports kit.catalog."""
    graph = import_graph()
    seen, todo = set(), [m for m in graph if m.startswith("ami.neuron")]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    assert not [m for m in seen if m.startswith(("harness", "stacks"))]


# Which layer may import which (lazy imports included); the most specific key names the rule. The
# facts the images are built from (kit.pins, kit.neuron_facts) are core data the image stacks, the
# harness and ami's patch check read; ami/ itself is image payload, which the core never imports,
# and the engine (ami.neuron) stands alone because the Neuron image ships it alone.
FORBIDDEN = {
    "stacks": ("harness",),
    "app": ("harness",),
    "harness": ("stacks", "app", "ami"),
    "kit": ("harness", "stacks", "app", "ami"),
    "ami": ("harness", "stacks", "app"),
    "ami.neuron": ("harness", "stacks", "app", "kit", "ami.check_patch"),
}
# Third-party packages the core must not import: the harness runs without the CDK, and the CDK app
# must not need boto3 at synth. botocore is allowed for its bundled data (kit/awsdata.py).
CORE_FORBIDDEN_PACKAGES = ("aws_cdk", "constructs", "cdk_nag", "boto3", "paramiko", "strands")


def layer(module: str) -> str:
    return module.partition(".")[0]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def rule_for(module: str) -> tuple[str, ...]:
    """The forbidden targets of ``module``: FORBIDDEN's entry for the longest key it is under."""
    keys = [k for k in FORBIDDEN if _under(module, k)]
    return FORBIDDEN[max(keys, key=len)] if keys else ()


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if any(_under(t, f) for f in rule_for(m)):
                out.append(f"{m} -> {t}")
    return out


def external_imports(path: Path) -> set[str]:
    names = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.partition(".")[0] for a in node.names}
        elif not node.level and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_the_direction_check_sees_a_lazy_import_the_wrong_way(tmp_path):
    """The oracle for the direction rule: a stacks module that imports the harness inside a
    function, and a harness module that imports stacks at the top, are both found."""
    for pkg, text in {"stacks": "def f():\n    from harness import run\n", "harness": "import stacks.x\n",
                      "kit": "import json\n"}.items():
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
        (tmp_path / pkg / "x.py").write_text(text)
    (tmp_path / "harness" / "run.py").write_text("from kit import x\n")
    mods = {module_name_in(tmp_path, p): p for p in tmp_path.rglob("*.py")}
    graph = {n: edges(n, p, set(mods)) for n, p in mods.items()}
    assert wrong_way(graph) == ["harness.x -> stacks.x", "stacks.x -> harness", "stacks.x -> harness.run"]


def test_stacks_and_harness_meet_only_in_the_core():
    graph = import_graph()
    assert not wrong_way(graph), "imports the wrong way: " + "; ".join(wrong_way(graph))
    # both sides really use the core (the rule is not met by accident of an empty layer)
    assert any(t.startswith("kit.") for m, ts in graph.items() if layer(m) == "stacks" for t in ts)
    assert any(t.startswith("kit.") for m, ts in graph.items() if layer(m) == "harness" for t in ts)


def test_the_core_imports_no_cdk_and_no_boto3():
    bad = {str(p.relative_to(ROOT)): sorted(external_imports(p) & set(CORE_FORBIDDEN_PACKAGES))
           for p in sorted((ROOT / "kit").rglob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}


# --------------------------------------------------------------------------- the harness's folders
# harness/'s root holds the vocabulary every part shares, the one door, and the packages; each
# module here is listed with who needs it. A command (a module with its own main) lives in its
# package: access/ (the tunnel), account/ (preflight, images, deploy, leftovers), run/ (the run
# and its stages), and the stage packages (agent, bench, accuracy, cost, report, package).
HARNESS_ROOT = {
    "__init__": "the package",
    "__main__": "python -m harness COMMAND, the one door to every command",
    "endpoint": "Endpoint, the one description of a backend every part passes around",
    "protocols": "the protocol registry (bench clients, agent models, accuracy's ask)",
    "results": "the results directory and its files, written by every stage, read by the report",
    "discovery": "the deployed backends as Endpoints, for the run and the accuracy command",
    "http_deadline": "one HTTP request under a total deadline (discovery, accuracy, the run's weights)",
    "procs": "child processes and their loopback ports (the OpenSSH tunnel, calibration)",
}


def harness_root_problems(root: Path) -> list[str]:
    """What harness/'s root holds besides HARNESS_ROOT's modules and packages."""
    out = [f"harness/{p.name}: not vocabulary; a command or a part of one goes in its package"
           for p in sorted((root / "harness").glob("*.py")) if p.stem not in HARNESS_ROOT]
    out += [f"harness/{d.name}/: a folder without __init__.py" for d in sorted((root / "harness").iterdir())
            if d.is_dir() and d.name != "__pycache__" and not (d / "__init__.py").exists()]
    return out


def harness_rule_problems(graph: dict[str, set[str]]) -> list[str]:
    """Imports against the harness's layout (lazy ones included):
    - a vocabulary module imports no harness package, only other vocabulary;
    - harness.access imports nothing of the harness but itself and the vocabulary;
    - harness.account imports neither the run nor the tunnel;
    - nothing imports the run from outside harness.run: it is the top, its stages' packages never
      call back into it (python -m harness reaches it by name, not by import)."""
    vocabulary = {f"harness.{m}" for m in HARNESS_ROOT if not m.startswith("__")}
    out = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if not _under(t, "harness") or t == "harness":
                continue
            if m in vocabulary and t not in vocabulary:
                out.append(f"{m} -> {t}: vocabulary imports only vocabulary")
            if _under(m, "harness.access") and not (_under(t, "harness.access") or t in vocabulary):
                out.append(f"{m} -> {t}: the tunnel imports only itself and the vocabulary")
            if _under(m, "harness.account") and (_under(t, "harness.run") or _under(t, "harness.access")):
                out.append(f"{m} -> {t}: the account commands need neither the run nor the tunnel")
            if _under(t, "harness.run") and not _under(m, "harness.run"):
                out.append(f"{m} -> {t}: only the run imports the run")
    return out


def same_name_modules(root: Path) -> list[str]:
    """Modules named as their own package (harness/access/access.py): the package's __init__ is
    the place for what the package itself is."""
    return [str((d / f"{d.name}.py").relative_to(root)) for pkg in PACKAGES
            for d in sorted(p.parent for p in (root / pkg).rglob("__init__.py"))
            if (d / f"{d.name}.py").exists()]


def test_the_layout_rules_see_a_command_back_at_the_root(tmp_path):
    """The oracle: a command module at the root, a folder that is no package, a vocabulary module
    importing a package, the tunnel importing the run, an account command opening a tunnel, a
    stage calling back into the run, and a module named as its package are each found."""
    h = tmp_path / "harness"
    for rel in ("__init__.py", "endpoint.py", "preflight.py", "access/__init__.py", "access/access.py",
                "notes/readme.txt", "run/__init__.py"):
        (h / rel).parent.mkdir(parents=True, exist_ok=True)
        (h / rel).write_text("")
    assert harness_root_problems(tmp_path) == [
        "harness/preflight.py: not vocabulary; a command or a part of one goes in its package",
        "harness/notes/: a folder without __init__.py"]
    graph = {"harness.endpoint": {"harness.results", "harness.bench.api", "kit.catalog"},
             "harness.access.tunnel": {"harness.access.hostkeys", "harness.endpoint", "harness.run.stages"},
             "harness.account.images": {"harness.cost.prices", "harness.access.tunnel"},
             "harness.bench.api": {"harness", "harness.run", "harness.run.cli"},
             "harness.run.cli": {"harness.run.stages", "harness.access.tunnel", "harness.account.preflight"}}
    assert harness_rule_problems(graph) == [
        "harness.access.tunnel -> harness.run.stages: the tunnel imports only itself and the vocabulary",
        "harness.access.tunnel -> harness.run.stages: only the run imports the run",
        "harness.account.images -> harness.access.tunnel: the account commands need neither the run nor the tunnel",
        "harness.bench.api -> harness.run: only the run imports the run",
        "harness.bench.api -> harness.run.cli: only the run imports the run",
        "harness.endpoint -> harness.bench.api: vocabulary imports only vocabulary"]
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
    assert same_name_modules(tmp_path) == ["harness/access/access.py"]


def test_the_harness_root_holds_only_the_vocabulary_and_the_packages():
    assert not harness_root_problems(ROOT), "; ".join(harness_root_problems(ROOT))
    assert {"harness.access", "harness.account", "harness.run"} <= set(import_graph())


def test_the_harness_packages_import_as_the_layout_says():
    problems = harness_rule_problems(import_graph())
    assert not problems, "; ".join(problems)


def test_no_module_is_named_as_its_package():
    assert not same_name_modules(ROOT), same_name_modules(ROOT)


def test_python_m_harness_run_still_runs_the_run():
    """The README and the mission type ``python -m harness.run``: the run is a package with a
    __main__, and the one door's table points at the same function."""
    from harness.__main__ import COMMANDS

    assert (ROOT / "harness" / "run" / "__main__.py").exists()
    assert COMMANDS["run"][0] == "harness.run.cli:main"
    assert "harness.run.cli" in import_graph()["harness.run.__main__"]
