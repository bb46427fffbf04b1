"""The attendee's set-up (`make setup-run`: requirements.txt only) is enough for what an attendee
runs: every `python -m harness` command and the CDK app (`npx cdk synth` runs app.py) import only
what requirements.txt installs, with its dependencies.

Read from the source with ``ast``, from each command's module (and `python -m harness` itself)
through every product module it reaches:

* at module level (what runs on import, class bodies included, function bodies not) every
  third-party package must be in the lean set: a command that cannot even start without the dev
  set is the failure this guards against;
* lazily too (imports inside functions, which run when that path is taken), only the extras a
  command is documented to need may appear, each from its own requirements file: lm-evaluation-
  harness for `run`/`accuracy --tasks` (requirements-accuracy.txt), torch and transformers for
  `package build` (requirements-package.txt).

Imports under ``if TYPE_CHECKING:`` never run; an import inside ``try: ... except ImportError`` is
optional and not counted. The lean set is requirements.txt's pins and, recursively, the
requirements their installed metadata declares (with the extras asked for), as pip resolves them.
A real install of the lean set in a fresh clone, as a non-root user, is in docs/development.md.
"""
from __future__ import annotations

import ast
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kit", "harness", "stacks", "ami")
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
# Commands whose lazy imports may reach an extra, and the file that installs it.
EXTRAS = {"run": "requirements-accuracy.txt", "accuracy": "requirements-accuracy.txt",
          "package": "requirements-package.txt"}


@lru_cache(maxsize=None)
def product_modules(root: Path = ROOT) -> dict[str, Path]:
    files = [root / "app.py"] + [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    out = {}
    for p in files:
        if p.exists() and "__pycache__" not in p.parts:
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


@lru_cache(maxsize=None)
def installed_closure(requirement_file: Path) -> frozenset[str]:
    """Canonical names of the file's distributions and, recursively, what each requires."""
    todo = []
    for line in requirement_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            r = Requirement(line)
            todo.append((canonicalize_name(r.name), frozenset(r.extras)))
    seen: dict[str, frozenset[str]] = {}
    while todo:
        name, extras = todo.pop()
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, frozenset()) | extras
        for spec in metadata.requires(name) or []:
            r = Requirement(spec)
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in (seen[name] or {""})):
                todo.append((canonicalize_name(r.name), frozenset(r.extras)))
    return frozenset(seen)


def _names(node: ast.expr | None) -> set[str]:
    """The names an expression spells: TYPE_CHECKING, typing.TYPE_CHECKING, (ImportError, OSError)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Tuple):
        return {n for e in node.elts for n in _names(e)}
    return set()


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in _names(node.test)


def _optional(node: ast.Try) -> bool:
    return any(_names(h.type) & {"ImportError", "ModuleNotFoundError"} for h in node.handlers)


def import_nodes(tree: ast.AST, *, lazy: bool):
    """The import statements that can run: at module level (class bodies included), or anywhere
    when ``lazy``; none under ``if TYPE_CHECKING:`` or in the body of an ImportError ``try``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not lazy:
            continue
        elif isinstance(node, ast.Try) and _optional(node):
            stack.extend(node.handlers + node.orelse + node.finalbody)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            stack.extend(ast.iter_child_nodes(node))


@lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@lru_cache(maxsize=None)
def module_imports(path: Path, package: str, lazy: bool) -> tuple[str, ...]:
    """The absolute names one module's import statements name (``from a import b``: a and a.b)."""
    out: list[str] = []
    for node in import_nodes(_parsed(path), lazy=lazy):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return tuple(out)


@lru_cache(maxsize=1)
def provided_by() -> dict[str, frozenset[str]]:
    """Import name -> the canonical names of the installed distributions that provide it."""
    return {name: frozenset(canonicalize_name(d) for d in dists)
            for name, dists in metadata.packages_distributions().items()}


def third_party(entries: list[str], *, lazy: bool, modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Top-level third-party import name -> the product modules importing it, over every product
    module the entries reach (each module's parent packages run first, so they count)."""
    modules = product_modules() if modules is None else modules
    ours = {m.partition(".")[0] for m in modules}

    def with_parents(m: str) -> list[str]:
        parts = m.split(".")
        return [p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in modules]

    def product(target: str) -> str | None:
        parts = target.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)

    out: dict[str, set[str]] = {}
    seen: set[str] = set()
    todo = [p for e in entries for p in with_parents(e)]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        path = modules[m]
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for t in module_imports(path, package, lazy):
            top = t.partition(".")[0]
            if top in ours:
                hit = product(t)
                if hit:
                    todo.extend(with_parents(hit))
            elif top not in STDLIB:
                out.setdefault(top, set()).add(m)
    return out


def outside(imports: dict[str, set[str]], allowed: set[str]) -> dict[str, list[str]]:
    """The imports no allowed distribution provides (an import name no installed distribution
    provides at all is outside too)."""
    return {name: sorted(by) for name, by in sorted(imports.items())
            if not provided_by().get(name, frozenset()) & allowed}


def commands() -> dict[str, str]:
    from harness.__main__ import COMMANDS

    return {name: ref.partition(":")[0] for name, (ref, _) in COMMANDS.items()}


@pytest.fixture(scope="module")
def lean() -> frozenset[str]:
    return installed_closure(ROOT / "requirements.txt")


def test_the_lean_set_is_what_an_attendee_needs_and_no_more(lean):
    """The CDK app and the harness's transports are in it; the engine and the test tools are not."""
    assert {"aws-cdk-lib", "constructs", "cdk-nag", "boto3", "paramiko", "strands-agents"} <= lean
    assert not {"torch", "transformers", "pytest", "moto", "cfn-lint", "lm-eval"} & lean


@pytest.mark.parametrize("command", sorted(commands()) + ["cdk synth (app.py)"])
def test_each_command_imports_only_the_lean_set(command, lean):
    entry = ["app"] if command.startswith("cdk synth") else ["harness.__main__", commands()[command]]
    assert outside(third_party(entry, lazy=False), lean) == {}, "needed on import, not in requirements.txt"
    extra = installed_closure(ROOT / EXTRAS[command]) if command in EXTRAS else frozenset()
    assert outside(third_party(entry, lazy=True), lean | extra) == {}, \
        f"reached lazily, in neither requirements.txt nor {EXTRAS.get(command, 'an extra it may need')}"


def test_the_extras_are_really_reached_lazily_only(lean):
    """The extras above are used (this allowance is no dead letter) and never on import."""
    for command, req in sorted(set(EXTRAS.items())):
        entry = ["harness.__main__", commands()[command]]
        assert outside(third_party(entry, lazy=True), lean), command
        assert not outside(third_party(entry, lazy=False), lean), command


def test_the_check_sees_a_module_level_import_a_lazy_one_and_an_optional_one(tmp_path):
    """The oracle: a command module importing torch on import is caught, one importing it in a
    function only lazily, one under TYPE_CHECKING or in an ImportError try not at all; through
    a relative import and a parent package's __init__ too."""
    (tmp_path / "harness" / "cmd").mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (tmp_path / "harness" / "cmd" / "__init__.py").write_text("import yaml\n")
    (tmp_path / "harness" / "cmd" / "main.py").write_text(
        "from __future__ import annotations\nimport json\nfrom typing import TYPE_CHECKING\n"
        "from .helper import x\nif TYPE_CHECKING:\n    import pandas\n"
        "try:\n    import uvloop\nexcept ImportError:\n    uvloop = None\n"
        "def main():\n    import lm_eval\n")
    (tmp_path / "harness" / "cmd" / "helper.py").write_text("import torch.nn\nx = 1\n")
    modules = product_modules(tmp_path)
    assert third_party(["harness.cmd.main"], lazy=False, modules=modules) == {
        "yaml": {"harness.cmd"}, "torch": {"harness.cmd.helper"}}
    assert set(third_party(["harness.cmd.main"], lazy=True, modules=modules)) == {"yaml", "torch", "lm_eval"}
    assert outside({"torch": {"m"}, "yaml": {"m"}, "no_such_package_anywhere": {"m"}}, {"pyyaml"}) == {
        "no_such_package_anywhere": ["m"], "torch": ["m"]}
