"""--resume after a crash, and a planted or damaged output directory.

A run killed mid-write leaves a torn last line in items.jsonl; the next record must start
on a line of its own (it was glued onto the torn one and lost, so the item read as unanswered),
and items.jsonl is never written through a symlink. run.json of the earlier run is read
bounded, without following links, and checked; a damaged one is one line naming it, exit 2,
before anything is asked again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.accuracy.cli import main
from tests.accuracy.scripted import ScriptedServer, numbered

N = 6
RIGHT = {0, 1, 3, 5}


def _items(path: Path, n: int = N) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}: what is {i} plus {i}?",
                                        "answer": str(2 * i)}) + "\n" for i in range(n)))
    return path


@pytest.fixture
def server():
    s = ScriptedServer(numbered(RIGHT))
    yield s
    s.stop()


def _run(args: list[str]) -> int:
    return main(args, echo=lambda s: None)


def _records(out: Path) -> list[dict]:
    recs = []
    for line in (out / "items.jsonl").read_bytes().split(b"\n"):
        try:
            recs.append(json.loads(line))
        except ValueError:
            continue
    return recs


# -- a torn last line -----------------------------------------------------------------------------
def _tears() -> list[tuple[str, object]]:
    """Every way a crash can leave the last line: cut at each of many offsets of the last record
    (one byte, a third, half, all but the newline...), a multi-byte character cut in two, NUL
    bytes (a file system that extended the file before the data reached it), a lone CR."""
    cuts = [("cut", f) for f in (1, 2, 5, 17, 0.25, 0.33, 0.5, 0.66, 0.9, -2, -1)]
    return cuts + [("utf8_half", None), ("nuls", None), ("cr", None), ("whole_no_newline", None)]


TEARS = _tears()


def _tear(path: Path, how: str, at) -> None:
    data = path.read_bytes()
    head, last = data[:-1].rsplit(b"\n", 1)
    head += b"\n"
    last += b"\n"
    if how == "cut":
        k = int(len(last) * at) if isinstance(at, float) else (at if at > 0 else len(last) + at)
        path.write_bytes(head + last[:k])
    elif how == "utf8_half":
        path.write_bytes(head + '{"backend":"a","response":"é'.encode()[:-1])
    elif how == "nuls":
        path.write_bytes(head + b"\0" * 37)
    elif how == "cr":
        path.write_bytes(head + last[:-1] + b"\r")
    elif how == "whole_no_newline":  # the record made it, its newline did not
        path.write_bytes(head + last[:-1])


@pytest.mark.parametrize("how,at", TEARS, ids=[f"{h}-{a}" for h, a in TEARS])
def test_a_torn_last_line_loses_nothing_on_resume(tmp_path, server, how, at):
    items = _items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    args = ["--endpoint", f"a={server.url}", "--items", str(items), "--out", str(out), "--concurrency", "1"]
    assert _run(args) == 0
    _tear(out / "items.jsonl", how, at)
    kept = {r["id"] for r in _records(out)}
    asked = len(server.questions())
    assert _run([*args, "--resume"]) == 0
    acc = json.loads((out / "accuracy.json").read_text())
    assert acc["backends"]["a"]["n"] == N and acc["backends"]["a"]["complete"] is True
    assert acc["backends"]["a"]["correct"] == len(RIGHT)
    # only what the tear lost was asked again, and every new record is whole on its own line
    assert len(server.questions()) - asked == N - len(kept)
    assert {r["id"] for r in _records(out)} == {f"q{i}" for i in range(N)}
    if len(kept) < N:  # something was appended: it ends a whole line
        assert (out / "items.jsonl").read_bytes().endswith(b"}\n")


def test_a_torn_line_then_two_resumes_still_counts_every_item(tmp_path, server):
    """The tear is kept as a line of its own (readers skip it); later appends stay whole."""
    items = _items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    args = ["--endpoint", f"a={server.url}", "--items", str(items), "--out", str(out)]
    assert _run([*args, "--limit", "3"]) == 0
    _tear(out / "items.jsonl", "cut", 0.5)
    assert _run([*args, "--limit", "4", "--resume"]) == 0
    assert _run([*args, "--resume"]) == 0
    assert json.loads((out / "accuracy.json").read_text())["backends"]["a"]["n"] == N


# -- never written through a symlink ------------------------------------------------------------
def _plant(out: Path, kind: str, outside: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    p = out / "items.jsonl"
    if kind == "symlink_to_file":
        outside.write_text("precious\n")
        p.symlink_to(outside)
    elif kind == "dangling_symlink":
        p.symlink_to(outside)
    elif kind == "symlink_to_dev_null":
        p.symlink_to("/dev/null")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "directory":
        p.mkdir()


PLANTED = ["symlink_to_file", "dangling_symlink", "symlink_to_dev_null", "fifo", "directory"]


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("kind", PLANTED)
def test_a_planted_items_file_is_refused_before_asking(tmp_path, server, capsys, kind, resume):
    items = _items(tmp_path / "items.jsonl")
    out, outside = tmp_path / "out", tmp_path / "outside.jsonl"
    _plant(out, kind, outside)
    before = outside.read_bytes() if outside.exists() else None
    rc = _run(["--endpoint", f"a={server.url}", "--items", str(items), "--out", str(out)]
              + (["--resume"] if resume else []))
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "items.jsonl" in err
    assert server.bodies == []  # nothing asked
    assert (outside.read_bytes() if outside.exists() else None) == before
    assert not os.path.lexists(outside) or kind == "symlink_to_file"


# -- run.json of the earlier run -----------------------------------------------------------------
def _write(p: Path, data) -> None:
    p.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())


RUN_JSON = [
    ("list", [1, 2]),
    ("string", "run"),
    ("number", 7),
    ("null", None),
    ("backends_list", {"backends": ["a"]}),
    ("backend_number", {"backends": {"old": 5}}),
    ("label_number", {"backends": {"old": {"label": 7}}}),
    ("status_list", {"backends": {"old": {"status": ["x"]}}}),
    ("model_dict", {"backends": {"old": {"model": {"id": 1}}}}),
    ("not_sent_string", {"backends": {"old": {"not_sent": "seed"}}}),
    ("skipped_dict", {"skipped": {"backend": "old"}}),
    ("skipped_number", {"skipped": [1]}),
    ("skipped_wrong_types", {"skipped": [{"backend": 1, "task": "t", "reason": "r"}]}),
    ("not_json", b"{not json"),
    ("not_utf8", b"\xff\xfe{}"),
    ("deep", b"[" * 100_000),
    ("symlink_dev_zero", "symlink:/dev/zero"),
    ("symlink_outside", "symlink:OUTSIDE"),
    ("fifo", "fifo"),
    ("directory", "directory"),
]


@pytest.mark.parametrize("name,content", RUN_JSON, ids=[r[0] for r in RUN_JSON])
def test_a_damaged_run_json_is_one_line_before_anything_is_asked(tmp_path, server, capsys, name, content):
    items = _items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    args = ["--endpoint", f"a={server.url}", "--items", str(items), "--out", str(out), "--limit", "2"]
    assert _run(args) == 0
    asked = len(server.bodies)
    p = out / "run.json"
    p.unlink()
    if content == "symlink:/dev/zero":
        p.symlink_to("/dev/zero")
    elif content == "symlink:OUTSIDE":
        _write(tmp_path / "elsewhere.json", {"backends": {}})
        p.symlink_to(tmp_path / "elsewhere.json")
    elif content == "fifo":
        os.mkfifo(p)
    elif content == "directory":
        p.mkdir()
    else:
        _write(p, content)
    capsys.readouterr()
    rc = _run([*args[:-2], "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(out / "run.json") in err
    assert len(server.bodies) == asked  # nothing asked again


def test_a_sound_run_json_of_an_earlier_backend_is_kept(tmp_path, server):
    items = _items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    common = ["--items", str(items), "--out", str(out)]
    assert _run(["--endpoint", f"old={server.url}", *common]) == 0
    assert _run(["--endpoint", f"new={server.url}", *common, "--resume"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["backends"]["old"]["asked"] == "in an earlier run"
