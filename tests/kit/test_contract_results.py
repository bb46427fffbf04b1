"""The results-file contracts (kit/contracts/results.py) and their checker (kit/contracts/shape.py):
what a writer refuses, what a reader keeps, files from before schema_version and from a newer
kit, and that no harness module writes a results file around them."""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Required, TypedDict

import pytest

from kit.contracts import results as rc
from kit.contracts import shape

ROOT = Path(__file__).resolve().parents[2]


class Inner(TypedDict, total=False):
    x: float | None
    tags: list[str]


class Outer(TypedDict, total=False):
    key: Required[str]
    inner: Inner
    maybe: Inner | None
    counts: dict[str, int]


def test_problems_names_each_place():
    assert shape.problems(Outer, {"key": "k", "inner": {"x": 1, "tags": ["a"]}, "extra": object()}) == []
    found = shape.problems(Outer, {"inner": {"x": "1", "tags": ["a", 2]}, "counts": {"a": True}})
    assert found == ["key: missing", "inner.x: want a number or None, got str", "inner.tags[1]: want a string, got int",
                     "counts.a: want a whole number, got bool"]
    assert shape.problems(Inner, {"x": float("nan")}) == ["x: want a number or None, got float"]
    assert shape.problems(Outer, [1]) == [".: want an object, got list"]


def test_clean_removes_empties_drops_and_fills():
    bad: list[str] = []
    got = shape.clean(Outer, {"key": "k", "inner": {"x": "1", "tags": ["a", 2]}, "maybe": 5, "counts": {"a": "b", "c": 1},
                              "extra": [1]}, bad)
    # wrong scalar removed, wrong list item dropped, wrong optional object removed, absent containers filled
    assert got == {"key": "k", "inner": {"tags": ["a"]}, "counts": {"c": 1}, "extra": [1]}
    assert bad == ["inner.x", "inner.tags[1]", "maybe", "counts.a"]
    assert shape.clean(Outer, {"key": "k"}, bad) == {"key": "k", "inner": {"tags": []}, "counts": {}}
    with pytest.raises(shape.Invalid, match="key"):
        shape.clean(Outer, {"key": 3}, [])
    with pytest.raises(shape.Invalid):
        shape.clean(Outer, {}, [])


def test_a_writer_refuses_a_file_of_the_wrong_shape_and_stamps_the_version_first():
    with pytest.raises(rc.ContractError, match=r"cost.json: endpoints.g6.usd_per_hour: want a number or None, got str"):
        rc.COST.stamp({"endpoints": {"g6": {"usd_per_hour": "1"}}})
    out = rc.COST.stamp({"generated_at": "t", "endpoints": {}, "schema_version": 7})
    assert list(out) == ["schema_version", "generated_at", "endpoints"] and out["schema_version"] == rc.COST.version
    assert rc.BENCH_REQUESTS.stamp({"id": 5}, check=False) == {"schema_version": 1, "id": 5}  # the hot path


def test_files_from_before_versions_read_as_today():
    notes: list[str] = []
    assert rc.BENCH_SUMMARY.read([{"concurrency": 1, "output_tok_s": 2.0}], "s", notes)["levels"][0]["concurrency"] == 1
    assert rc.SCOREBOARD.read({"table": [{"backend": "a"}]}, "b", notes)["rows"] == [{"backend": "a"}]
    assert rc.SCOREBOARD.read([{"backend": "a"}], "b", notes)["rows"] == [{"backend": "a"}]
    meta = rc.META.read({"endpoints": {"g6": {"kind": "openai", "model_id": "m"}}}, "m", notes)
    assert meta["endpoints"] == [{"name": "g6", "model_id": "m", "protocol": "openai"}]
    assert notes == []  # an old file is not a problem


def test_a_newer_or_malformed_version_is_read_with_a_note():
    notes: list[str] = []
    got = rc.COST.read({"schema_version": 9, "endpoints": {}, "new_field": 1}, "cost.json", notes)
    assert got["new_field"] == 1
    assert notes == ["cost.json: written by a newer kit (schema_version 9; this kit reads up to 1): "
                     "fields it does not know are ignored"]
    rc.COST.read({"schema_version": "one", "endpoints": {}}, "cost.json", notes)
    assert notes[-1] == "cost.json: schema_version 'one' is not a whole number: read as version 1"


def test_a_file_that_cannot_be_placed_is_one_note():
    notes: list[str] = []
    assert rc.COST.read({"endpoints": []}, "cost.json", notes) is None
    assert rc.META.read([1], "meta.json", notes) is None
    assert notes == ["cost.json: skipped (endpoints is not an object)", "meta.json: skipped (not a JSON object)"]


def test_every_results_file_is_listed_once_with_a_distinct_name():
    names = [f.name for f in rc.FILES]
    assert len(names) == len(set(names))
    assert {f.form for f in rc.FILES} == {"json", "jsonl", "csv"}
    doc = (rc.__doc__ or "")
    for f in rc.FILES:
        assert Path(f.name).name.split("<")[0] in doc or f.name in doc, f.name


# Writers of files that are not results-directory contracts: the price snapshot (harness.cost
# snapshot --out, its own dated format), the package's files (manifest.json: harness/package),
# the report's pages (rendered from the contracts), and the safe-write helpers themselves.
NOT_RESULTS = {"harness/results.py", "harness/cost/__main__.py", "harness/report/__init__.py"}


def test_no_harness_module_writes_a_results_file_around_its_contract():
    """Every call of the bare writers (write_json, append_jsonl) outside harness/results.py is in
    a module that writes no results file: results go through write_file / append_record."""
    offenders = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in NOT_RESULTS or rel.startswith("harness/package/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in ("write_json", "append_jsonl"):
                    offenders.append(f"{rel}:{node.lineno} {called}")
    assert not offenders, offenders


def test_summary_levels_of_every_version():
    from harness.bench.store import levels_of

    assert levels_of([{"concurrency": 1}]) == [{"concurrency": 1}]
    assert levels_of({"schema_version": 1, "levels": [{"rate": 1}]}) == [{"rate": 1}]
    assert levels_of(7) == 7 and levels_of(None) is None


def test_a_bench_directory_from_before_versions_resumes(tmp_path):
    """--resume over a summary.json written as a bare list: its levels are kept, not refused."""
    from harness.bench.api import _prepare_dir

    out = tmp_path / "o"
    out.mkdir()
    config = {"endpoint": {"model_id": "m"}, "profile": "p", "requests": 1, "duration": None}
    (out / "bench.json").write_text(json.dumps(config))
    (out / "summary.json").write_text(json.dumps([{"concurrency": 1, "complete": True}]))
    (out / "requests.jsonl").write_text("")
    assert _prepare_dir(out, config, resume=True) == [{"concurrency": 1, "complete": True}]


def test_the_contracts_need_only_the_standard_library():
    """The bench's instance zip (harness/bench/remote.py) carries these modules to a Python that
    has nothing of the kit installed: they must import with no site-packages at all."""
    import subprocess
    import sys

    code = "import kit.contracts.results, kit.contracts.shape, kit.contracts.outputs, kit.contracts.boot_env"
    p = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_the_bench_zip_carries_the_contracts_it_imports():
    import io
    import zipfile

    from harness.bench.remote import kit_zip

    names = set(zipfile.ZipFile(io.BytesIO(kit_zip())).namelist())
    assert {"kit/__init__.py", "kit/contracts/__init__.py", "kit/contracts/results.py", "kit/contracts/shape.py"} <= names
