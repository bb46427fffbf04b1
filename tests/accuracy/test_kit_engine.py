"""harness.accuracy against the kit's own Neuron engine, the real CLI on CPU with its tiny random
model (ami/neuron/tiny.py): the engine takes ``seed`` with temperature 0 (greedy: nothing is drawn)
and ``stop`` (ami/neuron/api.py), so --items sends every field and lm-eval's chat requests reach it
directly. Random weights: the answers
are noise; what is checked is that every item is answered and recorded (not that the replies are
equal: the engine batches concurrent requests, which need not be bit-identical)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="the engine's CPU generator needs torch (requirements-engine.txt)")

from harness.accuracy.cli import main
from tests.accuracy.test_cli import write_items
from tests.neuron.engine_proc import tiny_engine


@pytest.fixture(scope="module")
def engine():
    with tiny_engine("--prompt-buckets", "64,256", "--max-total-tokens", "512", "--batch-size", "4",
                     "--batch-wait-ms", "50", "--cpu-threads", "1") as (port, _):
        yield f"http://127.0.0.1:{port}/v1"


def test_items_on_the_kit_engine(tmp_path, engine):
    items = write_items(tmp_path / "items.jsonl", 4)
    out = tmp_path / "out"
    rc = main(["--endpoint", f"x={engine}", "--endpoint", f"y={engine}", "--items", str(items), "--out", str(out),
               "--max-tokens", "8", "--concurrency", "2"], echo=lambda s: None)
    assert rc == 0
    lines = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and all(isinstance(r["correct"], bool) for r in lines)
    run = json.loads((out / "run.json").read_text())
    assert "not_sent" not in run["backends"]["x"]  # the greedy requests' seed is taken
    pair = json.loads((out / "accuracy.json").read_text())["pairs"][0]
    assert pair["n"] == 4


def test_lm_eval_task_on_the_kit_engine(tmp_path, engine, monkeypatch):
    pytest.importorskip("lm_eval", reason="requirements-accuracy.txt not installed")
    from tests.accuracy.test_lmeval import GEN_TASK

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"idx": i, "answer": str(2 * i)}) + "\n" for i in range(3)))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "acc_local_gen.yaml").write_text(GEN_TASK.format(data=data).replace("max_gen_toks: 64", "max_gen_toks: 8"))
    out = tmp_path / "out"
    rc = main(["--endpoint", f"x={engine}", "--tasks", "acc_local_gen", "--task-path", str(tasks),
               "--out", str(out)], echo=lambda s: None)
    assert rc == 0
    run = json.loads((out / "run.json").read_text())
    assert "lm_eval_via" not in run["backends"]["x"]  # lm-eval's seed and stop taken: no gateway
    assert json.loads((out / "accuracy.json").read_text())["backends"]["x"]["n"] == 3
