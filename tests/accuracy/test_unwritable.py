"""harness accuracy where its output cannot be written or its items cannot be read: a dangling
--out symlink, accuracy.json or run.json a directory, a file size limit (a full disk), an items
file that is a device, nested 100,000 deep or holds a 5,000-digit id. Each is one line, a
documented exit (2 before anything is asked, 1 once answers were recorded), never a traceback,
and what was recorded before it stays."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from harness.accuracy import items as items_mod
from harness.accuracy.cli import main
from tests.accuracy.scripted import ScriptedServer, numbered

ROOT = Path(__file__).resolve().parents[2]
N = 4


def _items(path: Path, n: int = N) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}: what is {i} plus {i}?",
                                        "answer": str(2 * i)}) + "\n" for i in range(n)))
    return path


@pytest.fixture(scope="module")
def server():
    s = ScriptedServer(numbered({0, 1}))
    yield s
    s.stop()


def _run(args: list[str]) -> int:
    return main(args, echo=lambda s: None)


def _one_line(err: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err


# -- --out that cannot be made, checked before anything is asked ---------------------------------
def _out(kind: str, d: Path) -> tuple[Path, str]:
    out = d / "out"
    if kind == "dangling symlink":
        out.symlink_to(d / "nowhere")
        return out, "is a symbolic link to"
    if kind == "symlink loop":
        out.symlink_to(out)
        return out, "is a symbolic link to"
    if kind == "a file":
        out.write_text("x")
        return out, "exists and is not a directory"
    if kind == "under a file":
        (d / "f").write_text("x")
        return d / "f" / "out", "is not a directory"
    out.mkdir()
    if kind == "accuracy.json a directory":
        (out / "accuracy.json").mkdir()
        return out, "accuracy.json is a directory"
    if kind == "run.json a directory":
        (out / "run.json").mkdir()
        return out, "run.json"
    raise AssertionError(kind)


OUTS = ["dangling symlink", "symlink loop", "a file", "under a file", "accuracy.json a directory",
        "run.json a directory"]


@pytest.mark.parametrize("kind", OUTS)
def test_an_out_that_cannot_be_written_is_refused_before_asking(kind, tmp_path, server, capsys):
    out, words = _out(kind, tmp_path)
    asked = len(server.bodies)
    assert _run(["--endpoint", f"a={server.base_url}", "--model", "a=m", "--items", str(_items(tmp_path / "i.jsonl")),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert err.startswith(f"harness.accuracy: --out {out}: ") and words in err, err
    assert len(server.bodies) == asked


def test_accuracy_json_a_directory_on_resume_is_refused_and_keeps_the_answers(tmp_path, server, capsys):
    out = tmp_path / "out"
    args = ["--endpoint", f"a={server.base_url}", "--model", "a=m", "--items", str(_items(tmp_path / "i.jsonl")),
            "--out", str(out)]
    assert _run(args) == 0
    kept = (out / "items.jsonl").read_bytes()
    (out / "accuracy.json").unlink()
    (out / "accuracy.json").mkdir()
    capsys.readouterr()
    assert _run([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "accuracy.json is a directory" in err
    assert (out / "items.jsonl").read_bytes() == kept


# -- a file size limit (what a full disk does), in a child process ---------------------------------
@pytest.mark.parametrize("n, limit, full", [(4, 300, "items.jsonl"), (4, 700, "items.jsonl"), (2, 600, "run.json")])
def test_a_file_size_limit_is_one_line_exit_1_and_keeps_whole_records(n, limit, full, tmp_path, server):
    """A record is ~220 bytes, run.json ~870: the limit stops items.jsonl after one or three
    records, or (two items) only run.json."""
    items = _items(tmp_path / "i.jsonl", n)
    out = tmp_path / "out"

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    p = subprocess.run([sys.executable, "-m", "harness", "accuracy", "--endpoint", f"a={server.base_url}",
                        "--model", "a=m", "--items", str(items), "--out", str(out), "--concurrency", "1"],
                       cwd=ROOT, capture_output=True, text=True, preexec_fn=cap, timeout=120,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 1, p.stderr
    _one_line(p.stderr)
    assert p.stderr.startswith(f"harness.accuracy: cannot write {out / full}: File too large"), p.stderr
    assert "--resume" in p.stderr
    data = (out / "items.jsonl").read_bytes()
    assert 0 < len(data) <= limit and data.endswith(b"\n")  # the record that did not fit is not half there
    recs = [json.loads(line) for line in data.splitlines()]
    assert {r["backend"] for r in recs} == {"a"} and (len(recs) == n if full == "run.json" else len(recs) < n)


# -- an items file that cannot be read ---------------------------------------------------------
def _bad_items(kind: str, d: Path) -> tuple[Path, str]:
    p = d / "items.jsonl"
    good = json.dumps({"id": "q0", "question": "Q0: what is 0 plus 0?", "answer": "0"}) + "\n"
    if kind == "nested 100,000 deep":
        p.write_text(good + "[" * 100_000 + "]" * 100_000 + "\n")
        return p, ":2: JSON nested deeper than 64 levels"
    if kind == "5,000-digit id":
        p.write_text('{"id": ' + "9" * 5000 + ', "question": "Q1: what is 1 plus 1?", "answer": "2"}\n')
        return p, ":1: not JSON the kit reads (Exceeds the limit (4300 digits)"
    if kind == "5,000-digit answer":
        p.write_text('{"id": "a", "question": "Q1: what is 1 plus 1?", "answer": ' + "9" * 5000 + "}\n")
        return p, ":1: not JSON the kit reads"
    if kind == "/dev/zero":
        return Path("/dev/zero"), "a device, not an items file"
    if kind == "symlink to /dev/zero":
        p.symlink_to("/dev/zero")
        return p, "a device, not an items file"
    if kind == "a directory":
        p.mkdir()
        return p, "a directory, not an items file"
    if kind == "a fifo":
        os.mkfifo(p)
        return p, "a named pipe, not an items file"
    if kind == "missing":
        return d / "nope.jsonl", "no such file"
    if kind == "not utf-8":
        p.write_bytes(good.encode() + b'{"id": "\xff"}\n')
        return p, ":2: not UTF-8"
    if kind == "not json":
        p.write_text(good + "{id: 1}\n")
        return p, ":2: not JSON"
    raise AssertionError(kind)


ITEMS = ["nested 100,000 deep", "5,000-digit id", "5,000-digit answer", "/dev/zero", "symlink to /dev/zero",
         "a directory", "a fifo", "missing", "not utf-8", "not json"]


@pytest.mark.parametrize("kind", ITEMS)
def test_an_items_file_that_cannot_be_read_is_one_line_exit_2(kind, tmp_path, server, capsys):
    path, words = _bad_items(kind, tmp_path)
    asked = len(server.bodies)
    assert _run(["--endpoint", f"a={server.base_url}", "--model", "a=m", "--items", str(path),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert err.startswith(f"harness.accuracy: --items {path}") and words in err, err
    assert len(server.bodies) == asked


def test_an_items_file_over_the_cap_is_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(items_mod, "MAX_BYTES", 1024)
    path = _items(tmp_path / "i.jsonl", 40)
    with pytest.raises(items_mod.ItemsError, match="larger than 1 KiB"):
        items_mod.load_items(path)


def test_a_4000_digit_id_is_still_an_id(tmp_path):
    p = tmp_path / "i.jsonl"
    p.write_text('{"id": ' + "7" * 4000 + ', "question": "Q1: what is 1 plus 1?", "answer": "2"}\n')
    assert items_mod.load_items(p)[0].id == "7" * 4000


@pytest.mark.parametrize("limit", [0, 5, 40, 41, 95, 200])
def test_a_batch_cut_by_a_file_size_limit_keeps_its_whole_lines(limit, tmp_path):
    """harness.results.append_bytes (items.jsonl, requests.jsonl): what did not fit is cut back to
    the last whole line; the lines before it stay."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"torn":')  # a torn last line from an earlier crash: it gets its newline first
    batch = b"".join(json.dumps({"n": i, "pad": "x" * 20}).encode() + b"\n" for i in range(5))  # 33 B each
    code = ("import resource, sys; from pathlib import Path; from harness.results import append_bytes\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit + 8}, {limit + 8}))\n"
            "try:\n    append_bytes(Path(sys.argv[1]), bytes.fromhex(sys.argv[2]))\n"
            "except OSError as e:\n    print(e.errno)\n")
    p = subprocess.run([sys.executable, "-c", code, str(path), batch.hex()], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    data = path.read_bytes()
    assert data.startswith(b'{"torn":') and len(data) <= limit + 8
    sent = b"\n" + batch  # what append_bytes writes after the torn line
    fits = sent[:limit]
    assert data[len(b'{"torn":'):] == fits[:fits.rfind(b"\n") + 1]  # up to the last whole line, no more
