"""One one-line parser and one error base, read from the source with ``ast``: no second
ArgumentParser subclass (kit/cli.py OneLineParser is the one; the Neuron engine keeps its own
copy, since it imports nothing of the kit), every class named ``*Error`` derives from
kit/errors.py KitError (but an allow-list, each with its reason), no two exception classes share
a name, and a module that parses with OneLineParser has its ``main`` behind the command door
(``one_line_errors``), so a bad option is one line and never a traceback."""
from __future__ import annotations

import ast
import builtins
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("harness", "kit", "stacks", "app.py")  # the kit's product code outside the engine

PARSERS = {  # path -> the one ArgumentParser subclass it may define, and why
    "kit/cli.py": "OneLineParser",  # the one
    "ami/neuron/cli.py": "_Parser",  # the engine imports nothing of the kit (tests/test_import_graph.py)
}
NOT_KIT_ERRORS = {  # class -> why it does not derive from KitError
    "ChoiceError": "kit/az_choice.py is shipped alone in the AzChoice Lambda's asset (stacks/lambda_code.py "
                   "KIT_MODULES), standard library only, no import from the rest of the kit",
}
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


@functools.cache
def sources(roots=SCANNED) -> dict[str, str]:
    out = {}
    for r in roots:
        p = ROOT / r
        for f in [p] if p.is_file() else sorted(p.rglob("*.py")):
            if "__pycache__" not in f.parts:
                out[str(f.relative_to(ROOT))] = f.read_text()
    return out


@functools.lru_cache(maxsize=None)
def _parse(path: str, text: str) -> ast.Module:
    return ast.parse(text, path)


def _base_names(c: ast.ClassDef) -> list[str]:
    """The last name of each base: ``argparse.ArgumentParser`` -> ``ArgumentParser``."""
    return [ast.unparse(b).rpartition(".")[2] for b in c.bases]


def classes(srcs: dict[str, str]) -> list[tuple[str, ast.ClassDef]]:
    return [(path, n) for path, text in srcs.items() for n in ast.walk(_parse(path, text))
            if isinstance(n, ast.ClassDef)]


def parser_classes(srcs: dict[str, str]) -> list[str]:
    """``path:Class`` of every ArgumentParser subclass not in PARSERS."""
    return [f"{p}:{c.name}" for p, c in classes(srcs)
            if "ArgumentParser" in _base_names(c) and PARSERS.get(p) != c.name]


def exception_classes(srcs: dict[str, str]) -> dict[str, list[tuple[str, list[str]]]]:
    """name -> [(path, base names)] of every class that derives (by name, transitively) from a
    built-in exception or a class named *Error / *Exception."""
    every: dict[str, list[tuple[str, list[str]]]] = {}
    for p, c in classes(srcs):
        every.setdefault(c.name, []).append((p, _base_names(c)))
    known = set(BUILTIN_EXCEPTIONS)
    while True:
        more = {n for n, defs in every.items() if n not in known and any(
            b in known or b.endswith(("Error", "Exception")) for _, bases in defs for b in bases)}
        if not more:
            return {n: every[n] for n in every if n in known and n not in BUILTIN_EXCEPTIONS}
        known |= more


def not_kit_errors(excs: dict[str, list[tuple[str, list[str]]]]) -> list[str]:
    """``path:Class`` of every *Error class that does not reach KitError through its bases."""
    def reaches(name: str, seen: frozenset = frozenset()) -> bool:
        if name == "KitError":
            return True
        return name not in seen and any(reaches(b, seen | {name}) for _, bases in excs.get(name, []) for b in bases)
    return [f"{p}:{n}" for n, defs in excs.items() for p, bases in defs
            if n.endswith("Error") and n != "KitError" and n not in NOT_KIT_ERRORS
            and not any(reaches(b, frozenset({n})) for b in bases)]


def doorless(srcs: dict[str, str]) -> list[str]:
    """Modules that build a OneLineParser but have no ``main`` decorated with one_line_errors."""
    out = []
    for path, text in srcs.items():
        tree = _parse(path, text)
        builds = any(isinstance(n, ast.Call) and ast.unparse(n.func).rpartition(".")[2] == "OneLineParser"
                     for n in ast.walk(tree))
        door = any(isinstance(n, ast.FunctionDef) and n.name == "main" and any(
            "one_line_errors" in ast.unparse(d) for d in n.decorator_list) for n in tree.body)
        if builds and not door and path != "kit/cli.py":
            out.append(path)
    return out


def test_one_parser_class():
    assert parser_classes(sources((*SCANNED, "ami", "scripts"))) == []
    found = {f"{p}:{c.name}" for p, c in classes(sources(("kit/cli.py", "ami/neuron/cli.py")))}
    assert {f"{p}:{c}" for p, c in PARSERS.items()} <= found  # the allowed ones still exist by those names


def test_every_error_class_derives_from_kit_error():
    excs = exception_classes(sources())
    assert not_kit_errors(excs) == []
    assert set(NOT_KIT_ERRORS) <= set(excs)  # an allow-list entry without its class goes


def test_no_two_exception_classes_share_a_name():
    twice = {n: [p for p, _ in defs] for n, defs in exception_classes(sources()).items() if len(defs) > 1}
    assert twice == {}


def test_a_module_that_parses_with_the_kit_parser_has_its_main_behind_the_door():
    assert doorless(sources()) == []


def test_the_checks_see_what_they_forbid():
    srcs = {
        "a.py": "import argparse\nclass P(argparse.ArgumentParser):\n    pass\n"
                "class BadError(ValueError):\n    pass\nclass UsageError(Exception):\n    pass\n",
        "b.py": "from kit.errors import KitError\nclass UsageError(KitError):\n    pass\n"
                "class GoodError(UsageError):\n    pass\nclass Quiet(BadError):\n    pass\n",
        "c.py": "from kit.cli import OneLineParser\ndef main(argv=None):\n    OneLineParser().parse_args(argv)\n",
    }
    assert parser_classes(srcs) == ["a.py:P"]
    excs = exception_classes(srcs)
    assert set(excs) == {"BadError", "UsageError", "GoodError", "Quiet"}
    assert [n for n, defs in excs.items() if len(defs) > 1] == ["UsageError"]
    assert sorted(not_kit_errors(excs)) == ["a.py:BadError", "a.py:UsageError"]  # b.py's reaches KitError
    assert doorless(srcs) == ["c.py"]
