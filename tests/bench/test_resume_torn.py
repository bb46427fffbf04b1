"""The bench after a crash: a torn last line of requests.jsonl loses nothing on
--resume (the first new record was glued onto it and lost), a level whose records were torn is
not re-summarized as complete, and requests.jsonl, summary.json and bench.json are never
written or read through a symlink (one line naming the file, nothing written outside --out).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.bench.api import BenchError, run_bench
from harness.bench.spec import BenchSpec
from harness.bench.summarize import summarize_dir
from harness.endpoint import Endpoint
from tests.conftest import saved_levels

REQUESTS = 3


def _bench(ref, out: Path, **kw):
    args = dict(profile="10-8", concurrency=(1, 2), requests=REQUESTS, warmup=0, progress=False,
                request_timeout=10, time_limit=60, path_probes=0)
    args.update(kw)
    out = args.pop("out_dir", out)
    return run_bench(Endpoint(name="ref", protocol="openai", model_id="ref-model", base_url=ref.base_url),
                     BenchSpec(**args), out_dir=out)


def _lines(out: Path) -> list[dict]:
    recs = []
    for line in (out / "requests.jsonl").read_bytes().split(b"\n"):
        try:
            recs.append(json.loads(line))
        except ValueError:
            continue
    return recs


# how the last line was left: cut at a byte offset or fraction of the last record, NUL bytes
TEARS = [("cut", x) for x in (1, 9, 0.25, 0.5, 0.75, -2)] + [("nuls", None), ("utf8_half", None)]


def _tear(path: Path, how: str, at) -> None:
    data = path.read_bytes()
    head, last = data[:-1].rsplit(b"\n", 1)
    head += b"\n"
    if how == "cut":
        k = int(len(last) * at) if isinstance(at, float) else (at if at > 0 else len(last) + 1 + at)
        path.write_bytes(head + last[:k])
    elif how == "nuls":
        path.write_bytes(head + b"\0" * 64)
    else:
        path.write_bytes(head + '{"id":"é'.encode()[:-1])


@pytest.mark.parametrize("how,at", TEARS, ids=[f"{h}-{a}" for h, a in TEARS])
def test_a_torn_line_then_resume_keeps_every_record_of_the_level_run_again(ref, tmp_path, how, at):
    """Crash during c=2 (its summary not written, its last record torn): --resume runs c=2 again
    and every one of its records is in requests.jsonl, so the level re-summarized from the raw
    records alone has all of them."""
    ref.configure(ttft_ms=5, itl_ms=1)
    out = tmp_path / "o"
    _bench(ref, out)
    levels = saved_levels(out / "summary.json")
    (out / "summary.json").write_text(json.dumps([lv for lv in levels if lv["concurrency"] == 1]))
    _tear(out / "requests.jsonl", how, at)
    levels = _bench(ref, out, resume=True)
    c2 = next(lv for lv in levels if lv["concurrency"] == 2)
    assert c2["complete"] and c2["completed"] == REQUESTS
    again = [r for r in _lines(out) if r["level_run"] == c2["level_run"]]
    assert len(again) == REQUESTS  # the first record after the tear was glued onto it and lost
    redo = {lv["concurrency"]: lv for lv in summarize_dir(out)}
    assert redo[2]["completed"] == REQUESTS and redo[2]["complete"] is True
    assert redo[1]["completed"] == REQUESTS and redo[1]["complete"] is True


@pytest.mark.parametrize("how,at", TEARS[:3], ids=[f"{h}-{a}" for h, a in TEARS[:3]])
def test_a_level_whose_record_is_torn_is_not_resummarized_as_complete(ref, tmp_path, how, at):
    ref.configure(ttft_ms=5, itl_ms=1)
    out = tmp_path / "o"
    _bench(ref, out)
    _tear(out / "requests.jsonl", how, at)
    redo = {lv["concurrency"]: lv for lv in summarize_dir(out)}
    assert redo[2]["completed"] == REQUESTS - 1
    assert redo[2]["complete"] is False  # summary.json says 3 were sent; 2 are left
    assert redo[1]["complete"] is True


def _plant(p: Path, kind: str, outside: Path) -> None:
    if os.path.lexists(p):
        p.unlink()
    if kind == "symlink_to_file":
        outside.write_text("precious\n")
        p.symlink_to(outside)
    elif kind == "dangling_symlink":
        p.symlink_to(outside)
    elif kind == "symlink_to_dev_zero":
        p.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(p)


KINDS = ["symlink_to_file", "dangling_symlink", "symlink_to_dev_zero", "fifo"]
CASES = [(f, k, r) for f in ("requests.jsonl", "summary.json", "bench.json") for k in KINDS for r in (False, True)
         if f == "requests.jsonl" or r]  # summary.json / bench.json are read only on --resume


@pytest.mark.parametrize("name,kind,resume", CASES, ids=[f"{n}-{k}-{'resume' if r else 'new'}" for n, k, r in CASES])
def test_a_planted_file_is_refused_in_one_line_and_nothing_is_written_outside(ref, tmp_path, name, kind, resume):
    ref.configure(ttft_ms=5, itl_ms=1)
    out, outside = tmp_path / "o", tmp_path / "outside"
    if resume:
        _bench(ref, out, concurrency=(1,))
    out.mkdir(exist_ok=True)
    _plant(out / name, kind, outside)
    before = outside.read_bytes() if outside.exists() else None
    with pytest.raises(BenchError) as e:
        _bench(ref, out, resume=resume)
    assert name in str(e.value) and "\n" not in str(e.value)
    assert (outside.read_bytes() if outside.exists() else None) == before
    assert os.path.islink(out / name) or kind == "fifo"
