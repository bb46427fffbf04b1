"""python -m harness.accuracy against scripted local servers with known right/wrong patterns."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.accuracy.cli import main
from tests.accuracy import oracle
from tests.accuracy.scripted import ScriptedServer, numbered

N = 40
# a right on 0..28 (29), b right on 0..19 and 29..30 (22): both 20, a_only 9, b_only 2, neither 9
A_RIGHT = set(range(29))
B_RIGHT = set(range(20)) | {29, 30}


def write_items(path: Path, n: int = N) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}: what is {i} plus {i}?",
                                        "answer": str(2 * i)}) + "\n" for i in range(n)))
    return path


@pytest.fixture
def servers():
    made: list[ScriptedServer] = []

    def make(*a, **kw) -> ScriptedServer:
        made.append(ScriptedServer(*a, **kw))
        return made[-1]

    yield make
    for s in made:
        if not s._dead:
            s.stop()


def run(args: list[str]) -> int:
    return main(args, echo=lambda s: None)


def load(out: Path) -> tuple[dict, list[dict]]:
    acc = json.loads((out / "accuracy.json").read_text())
    lines = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    return acc, lines


def expected_pair(a_right: set[int], b_right: set[int], ids: list[int]) -> dict:
    both = sum(i in a_right and i in b_right for i in ids)
    a_only = sum(i in a_right and i not in b_right for i in ids)
    b_only = sum(i in b_right and i not in a_right for i in ids)
    neither = len(ids) - both - a_only - b_only
    return {"n": len(ids), "both": both, "a_only": a_only, "b_only": b_only, "neither": neither}


def test_two_backends_known_pattern(tmp_path, servers):
    a = servers(numbered(A_RIGHT))
    b = servers(numbered(B_RIGHT, style="prose"))
    items = write_items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    rc = run(["--endpoint", f"a={a.url}", "--endpoint", f"b={b.url}", "--items", str(items),
              "--out", str(out), "--concurrency", "1"])
    assert rc == 0
    acc, lines = load(out)
    assert list(acc) == ["schema_version", "backends", "pairs"]  # its contract's version first
    for name, right in (("a", A_RIGHT), ("b", B_RIGHT)):
        got = acc["backends"][name]
        assert set(got) == {"n", "correct", "accuracy", "ci95", "complete"}
        assert got["n"] == N and got["correct"] == len(right) and got["complete"] is True
        assert got["accuracy"] == pytest.approx(len(right) / N)
        assert got["ci95"] == pytest.approx(list(oracle.wilson_by_bisection(len(right), N)), abs=1e-9)
    [pair] = acc["pairs"]
    assert set(pair) == {"a", "b", "n", "both", "a_only", "b_only", "neither", "diff", "ci95",
                         "p_mcnemar", "min_detectable_diff"}
    want = expected_pair(A_RIGHT, B_RIGHT, list(range(N)))
    assert {k: pair[k] for k in want} == want == {"n": 40, "both": 20, "a_only": 9, "b_only": 2, "neither": 9}
    assert (pair["a"], pair["b"]) == ("a", "b")
    assert pair["diff"] == pytest.approx((29 - 22) / N)
    assert pair["p_mcnemar"] == pytest.approx(oracle.mcnemar_p(9, 2), rel=1e-12)
    assert pair["ci95"] == pytest.approx(list(oracle.newcombe([[20, 9], [2, 9]])), abs=1e-9)
    assert oracle.mcnemar_power(pair["min_detectable_diff"], N, 11 / N) == pytest.approx(0.80, abs=0.02)
    # one record per item and backend, with the fields the issue names
    assert len(lines) == 2 * N
    for rec in lines:
        i = int(rec["id"][1:])
        right = A_RIGHT if rec["backend"] == "a" else B_RIGHT
        assert rec["task"] == "items" and len(rec["prompt_hash"]) == 16
        assert rec["correct"] is (i in right)
        assert rec["extracted"] == str(2 * i if i in right else 2 * i + 1)
        assert isinstance(rec["response"], str)
    # same items, same order, greedy and seeded, on both servers
    assert a.questions() == b.questions() and len(a.questions()) == N
    assert [q.split(":")[0] for q in a.questions()] == [f"Q{i}" for i in range(N)]
    for body in a.bodies + b.bodies:
        assert body["temperature"] == 0 and body["seed"] == 1234
    hashes = {(r["id"], r["prompt_hash"]) for r in lines}
    assert len(hashes) == N  # the same prompt hash for an item on both backends
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["backends"]["a"]["status"] == "complete"
    assert "Wilson" in run_json["methods"]["accuracy_ci95"]


def test_server_dies_mid_run_keeps_items_and_resume_finishes(tmp_path, servers):
    a = servers(numbered(A_RIGHT))
    c = servers(numbered(B_RIGHT), die_after=12)
    items = write_items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    args = ["--items", str(items), "--out", str(out), "--concurrency", "1", "--retries", "1"]
    rc = run(["--endpoint", f"a={a.url}", "--endpoint", f"c={c.url}", *args])
    assert rc == 1
    acc, lines = load(out)
    assert acc["backends"]["a"]["complete"] is True and acc["backends"]["a"]["n"] == N
    cb = acc["backends"]["c"]
    assert cb["complete"] is False and cb["n"] == 12
    assert cb["correct"] == len(B_RIGHT & set(range(12)))
    assert sum(r["backend"] == "c" for r in lines) == 12
    [pair] = acc["pairs"]
    want = expected_pair(A_RIGHT, B_RIGHT, list(range(12)))  # only the items both finished
    assert {k: pair[k] for k in want} == want
    assert pair["p_mcnemar"] == pytest.approx(oracle.mcnemar_p(want["a_only"], want["b_only"]))
    status = json.loads((out / "run.json").read_text())["backends"]["c"]["status"]
    assert status.startswith("incomplete") and "stopped after 12" in status

    # without --resume the directory is refused; with it only the 28 missing items are asked
    assert run(["--endpoint", f"a={a.url}", "--endpoint", f"c={c.url}", *args]) == 2
    c2 = servers(numbered(B_RIGHT))
    asked_a = len(a.bodies)
    rc = run(["--endpoint", f"a={a.url}", "--endpoint", f"c={c2.url}", *args, "--resume"])
    assert rc == 0
    assert len(a.bodies) == asked_a  # a had finished: nothing asked again
    assert [q.split(":")[0] for q in c2.questions()] == [f"Q{i}" for i in range(12, N)]
    acc, lines = load(out)
    assert acc["backends"]["c"]["complete"] is True and acc["backends"]["c"]["n"] == N
    assert {k: acc["pairs"][0][k] for k in ("both", "a_only", "b_only", "neither")} == \
        {"both": 20, "a_only": 9, "b_only": 2, "neither": 9}


def test_limit_takes_the_first_n(tmp_path, servers):
    a = servers(numbered(A_RIGHT))
    b = servers(numbered(B_RIGHT))
    items = write_items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    assert run(["--endpoint", f"a={a.url}", "--endpoint", f"b={b.url}", "--items", str(items),
                "--out", str(out), "--limit", "25"]) == 0
    acc, lines = load(out)
    assert acc["backends"]["a"]["n"] == 25 and len(lines) == 50
    assert sorted(int(q.split(":")[0][1:]) for q in a.questions()) == list(range(25))
    want = expected_pair(A_RIGHT, B_RIGHT, list(range(25)))
    assert {k: acc["pairs"][0][k] for k in want} == want


def test_client_error_is_an_item_failure_not_a_stop(tmp_path, servers):
    """A 400 for one item: recorded with its error, the rest answered, the backend incomplete;
    --resume asks that item again."""
    inner = numbered(A_RIGHT)
    refuse = {"on": True}
    a = servers(lambda text: 400 if text.startswith("Q3:") and refuse["on"] else inner(text))
    items = write_items(tmp_path / "items.jsonl", 6)
    out = tmp_path / "out"
    args = ["--endpoint", f"a={a.url}", "--items", str(items), "--out", str(out), "--concurrency", "1"]
    assert run(args) == 1
    acc, lines = load(out)
    assert acc["backends"]["a"] == {**acc["backends"]["a"], "n": 5, "correct": 5, "complete": False}
    [err] = [r for r in lines if r["correct"] is None]
    assert err["id"] == "q3" and "HTTP 400" in err["error"]
    assert len(a.questions()) == 6  # the items after the failed one were asked
    refuse["on"] = False
    assert run([*args, "--resume"]) == 0
    assert [q.split(":")[0] for q in a.questions()[6:]] == ["Q3"]
    acc, _ = load(out)
    assert acc["backends"]["a"]["n"] == 6 and acc["backends"]["a"]["complete"] is True


def _one_line_exit_2(capsys, args: list[str]) -> str:
    assert run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_bad_input_is_one_line_exit_2(tmp_path, capsys, servers):
    url = "http://127.0.0.1:9/v1"
    out = ["--out", str(tmp_path / "o")]
    err = _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--items", str(tmp_path / "nope.jsonl"), *out])
    assert "nope.jsonl" in err and "no such file" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "question": "q", "answer": "3"}) + "\n{not json\n")
    err = _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--items", str(bad), *out])
    assert "bad.jsonl:2" in err
    bad.write_text(json.dumps({"id": 1, "question": "q"}) + "\n")
    assert "answer" in _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--items", str(bad), *out])
    bad.write_text(json.dumps({"id": 1, "question": "q", "answer": "many words"}) + "\n")
    assert "number or a single letter" in _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--items", str(bad), *out])
    good = write_items(tmp_path / "good.jsonl", 3)
    err = _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--items", str(good), "--tasks", "gsm8kk", *out])
    assert "gsm8kk" in err and "gsm8k" in err
    assert "NAME=URL" in _one_line_exit_2(capsys, ["--endpoint", "nourl", "--items", str(good), *out])
    assert "--endpoint" in _one_line_exit_2(capsys, ["--items", str(good), *out])
    assert "--limit" in _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--items", str(good), "--limit", "0", *out])
    assert "nothing to ask" in _one_line_exit_2(capsys, ["--endpoint", f"a={url}", *out])
    assert "--bogus" in _one_line_exit_2(capsys, ["--endpoint", f"a={url}", "--bogus", *out])


def test_module_entry_point_bad_input(tmp_path):
    p = subprocess.run([sys.executable, "-m", "harness.accuracy", "--endpoint", "a=http://127.0.0.1:9/v1",
                        "--items", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "missing.jsonl" in p.stderr


def test_resume_adds_a_backend_measured_later(tmp_path, servers):
    """One stack, redeployed: bf16 measured first, int4 later into the same --out with --resume;
    the pair uses both runs' answers and bf16 is not asked again."""
    bf16 = servers(numbered(A_RIGHT), model="google/gemma-bf16")
    items = write_items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    common = ["--items", str(items), "--out", str(out)]
    assert run(["--endpoint", f"bf16={bf16.url}", *common]) == 0
    bf16.stop()
    int4 = servers(numbered(B_RIGHT), model="package:emb4")
    assert run(["--endpoint", f"int4={int4.url}", *common, "--resume"]) == 0
    acc, lines = load(out)
    assert list(acc["backends"]) == ["int4", "bf16"] and len(lines) == 2 * N
    assert acc["backends"]["bf16"]["complete"] is True and acc["backends"]["bf16"]["correct"] == len(A_RIGHT)
    [pair] = acc["pairs"]
    assert (pair["a"], pair["b"]) == ("int4", "bf16")
    assert {k: pair[k] for k in ("both", "a_only", "b_only", "neither")} == \
        {"both": 20, "a_only": 2, "b_only": 9, "neither": 9}
    meta = json.loads((out / "run.json").read_text())["backends"]
    assert meta["bf16"]["model"] == "google/gemma-bf16" and meta["bf16"]["asked"] == "in an earlier run"
    assert meta["int4"]["model"] == "package:emb4"


def test_a_server_that_refuses_seed_is_asked_without_it(tmp_path, servers):
    """A server that answers 400 to a seed (as the kit's Neuron engine does when sampling,
    ami/neuron/api.py): greedy needs none, so the seed is dropped for that server and run.json
    says so."""
    a = servers(numbered(A_RIGHT), refuse=("seed",))
    items = write_items(tmp_path / "items.jsonl", 8)
    out = tmp_path / "out"
    assert run(["--endpoint", f"a={a.url}", "--items", str(items), "--out", str(out), "--concurrency", "1"]) == 0
    acc, lines = load(out)
    assert acc["backends"]["a"]["n"] == 8 and all(r["correct"] is not None for r in lines)
    assert json.loads((out / "run.json").read_text())["backends"]["a"]["not_sent"] == ["seed"]
    assert "seed" in a.bodies[0] and all("seed" not in b for b in a.bodies[1:])


def test_ctrl_c_keeps_answers_and_resume_finishes(tmp_path, servers):
    """A real SIGINT to python -m harness.accuracy: exit 130 promptly, every answer so far in
    items.jsonl; --resume asks only the rest."""
    import os
    import signal
    import time

    slow_inner = numbered(A_RIGHT)

    def slow(text):
        time.sleep(0.15)
        return slow_inner(text)

    a = servers(slow)
    items = write_items(tmp_path / "items.jsonl")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "harness.accuracy", "--endpoint", f"a={a.url}", "--items", str(items),
           "--out", str(out), "--concurrency", "1"]
    from tests.conftest import sigint_as_a_terminal_would

    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_as_a_terminal_would)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (out / "items.jsonl").exists() and len((out / "items.jsonl").read_text().splitlines()) >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - t0 < 5
    assert "--resume continues" in stdout
    kept = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert 5 <= len(kept) < N and len({r["id"] for r in kept}) == len(kept)
    asked = len(a.questions())
    assert asked <= len(kept) + 1  # at most the one in flight when the signal came was not recorded
    rc = run(["--endpoint", f"a={a.url}", "--items", str(items), "--out", str(out), "--concurrency", "1", "--resume"])
    assert rc == 0
    assert len(a.questions()) - asked == N - len(kept)
    acc, _ = load(out)
    assert acc["backends"]["a"]["n"] == N and acc["backends"]["a"]["correct"] == len(A_RIGHT)
