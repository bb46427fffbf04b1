"""lm-evaluation-harness as the engine: a task YAML written by the test over a local JSONL file
(no hub download: HF_DATASETS_OFFLINE / HF_HUB_OFFLINE), run end to end against scripted local
OpenAI-compatible servers."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval", reason="requirements-accuracy.txt not installed")

from harness.accuracy.cli import main
from tests.accuracy import oracle
from tests.accuracy.scripted import WORDS, ScriptedServer, numbered

N = 12
A_RIGHT = set(range(10))  # 10 of 12
B_RIGHT = set(range(4)) | {10, 11}  # 6 of 12: both 4, a_only 6, b_only 2, neither 0

GEN_TASK = """task: acc_local_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Q{{{{idx}}}}: what is {{{{idx}}}} plus {{{{idx}}}}?"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: []
  do_sample: false
  temperature: 0.0
  max_gen_toks: 64
filter_list:
  - name: answer-line
    filter:
      - function: regex
        regex_pattern: "Answer: (-?[0-9]+)"
      - function: take_first
  - name: first-number
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

MC_TASK = """task: acc_local_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Q{{{{idx}}}}: what is {{{{idx}}}} plus {{{{idx}}}}?"
doc_to_choice: "{{{{[answer, answer ~ '1']}}}}"
doc_to_target: 0
metric_list:
  - metric: acc
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    """One directory for the module: lm-eval's task index (~14,700 YAMLs) is built once per path."""
    tmp = tmp_path_factory.mktemp("lmeval")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HOME", str(tmp / "hf"))  # nothing cached from elsewhere is used
        data = tmp / "data.jsonl"
        data.write_text("".join(json.dumps({"idx": i, "answer": str(2 * i)}) + "\n" for i in range(N)))
        d = tmp / "tasks"
        d.mkdir()
        (d / "acc_local_gen.yaml").write_text(GEN_TASK.format(data=data))
        (d / "acc_local_mc.yaml").write_text(MC_TASK.format(data=data))
        _word_tokenizer(tmp / "tokenizer")
        yield d


def _word_tokenizer(path) -> None:
    """A local word-level tokenizer that splits as the scripted server does (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    texts = [f"Q{i}: what is {i} plus {i}? {2 * i} {2 * i}1 x" for i in range(N)]
    words = ["[UNK]"] + sorted({w for t in texts for w in WORDS.findall(t)})
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="x").save_pretrained(str(path))


def prefers(right: set[int]):
    """Echo logprob of the last prompt token: high for the right choice (2i) on items in
    ``right``, high for the wrong one (2i then 1) on the others."""

    def lp(tokens: list[str]) -> float:
        if not tokens[0].startswith("Q"):  # the echo probe
            return -1.0
        i = int(tokens[0][1:])
        favoured = str(2 * i) if i in right else f"{2 * i}1"
        return -0.1 if tokens[-1] == favoured else -5.0

    return lp


def test_generative_task_end_to_end(tmp_path, task_dir):
    a, b = ScriptedServer(numbered(A_RIGHT)), ScriptedServer(numbered(B_RIGHT))
    out = tmp_path / "out"
    try:
        rc = main(["--endpoint", f"a={a.url}", "--endpoint", f"b={b.url}", "--tasks", "acc_local_gen",
                   "--task-path", str(task_dir), "--out", str(out), "--concurrency", "1"], echo=lambda s: None)
    finally:
        a.stop(), b.stop()
    assert rc == 0
    acc = json.loads((out / "accuracy.json").read_text())
    assert acc["backends"]["a"]["n"] == N and acc["backends"]["a"]["correct"] == len(A_RIGHT)
    assert acc["backends"]["b"]["correct"] == len(B_RIGHT)
    [pair] = acc["pairs"]
    assert {k: pair[k] for k in ("n", "both", "a_only", "b_only", "neither")} == \
        {"n": N, "both": 4, "a_only": 6, "b_only": 2, "neither": 0}
    assert pair["p_mcnemar"] == pytest.approx(oracle.mcnemar_p(6, 2))
    lines = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * N and {r["task"] for r in lines} == {"acc_local_gen"}
    for r in lines:
        i = int(r["id"])
        assert r["correct"] is (i in (A_RIGHT if r["backend"] == "a" else B_RIGHT))
        assert r["extracted"] == str(2 * i if r["correct"] else 2 * i + 1)
    # chat completions, greedy and seeded, the same questions in the same order on both
    assert all(body["path"].endswith("/chat/completions") for body in a.bodies)
    assert a.bodies[0]["stop"] and a.bodies[0]["max_tokens"] == 1  # the probe with lm-eval's fields
    assert all(body["temperature"] == 0 and body["seed"] == 1234 for body in a.bodies + b.bodies)
    assert sorted(a.questions()) == sorted(b.questions()) and len(a.questions()) == N
    run = json.loads((out / "run.json").read_text())
    assert run["tasks"]["acc_local_gen"]["scoring"]["acc_local_gen"] == "exact_match under filter answer-line"


def test_loglikelihood_task_skipped_on_a_chat_only_server(tmp_path, task_dir):
    a = ScriptedServer(numbered(A_RIGHT))
    out = tmp_path / "out"
    try:
        rc = main(["--endpoint", f"a={a.url}", "--tasks", "acc_local_mc", "--task-path", str(task_dir),
                   "--out", str(out)], echo=lambda s: None)
    finally:
        a.stop()
    assert rc == 1
    run = json.loads((out / "run.json").read_text())
    [skip] = run["skipped"]
    assert skip["backend"] == "a" and skip["task"] == "acc_local_mc"
    assert "/v1/completions with echo" in skip["reason"]
    assert "incomplete" in run["backends"]["a"]["status"] and "could not run" in run["backends"]["a"]["status"]
    assert not [b for b in a.bodies if "messages" in b]  # nothing was asked of the chat endpoint


def test_server_dies_mid_task_then_resume_uses_the_request_cache(tmp_path, task_dir):
    """lm-eval scores a task when it has every answer: a backend that dies mid-task is marked
    incomplete with no records for that task (the pair has no shared items); lm-eval's request
    cache keeps its answers, so --resume asks a new server only the rest."""
    a = ScriptedServer(numbered(A_RIGHT))
    c = ScriptedServer(numbered(B_RIGHT), die_after=6)  # the chat probe, then 5 items
    out = tmp_path / "out"
    args = ["--tasks", "acc_local_gen", "--task-path", str(task_dir), "--out", str(out),
            "--concurrency", "1", "--retries", "1"]
    try:
        rc = main(["--endpoint", f"a={a.url}", "--endpoint", f"c={c.url}", *args], echo=lambda s: None)
        assert rc == 1
        acc = json.loads((out / "accuracy.json").read_text())
        assert acc["backends"]["a"]["complete"] is True and acc["backends"]["a"]["n"] == N
        assert acc["backends"]["c"]["complete"] is False and acc["backends"]["c"]["n"] == 0
        assert acc["pairs"][0]["n"] == 0
        status = json.loads((out / "run.json").read_text())["backends"]["c"]["status"]
        assert "lm-eval stopped" in status
        c2 = ScriptedServer(numbered(B_RIGHT))
        asked_a = len(a.questions())
        rc = main(["--endpoint", f"a={a.url}", "--endpoint", f"c={c2.url}", *args, "--resume"],
                  echo=lambda s: None)
        c2.stop()
    finally:
        a.stop()
    assert rc == 0
    assert len(a.questions()) == asked_a  # every answer of a came from the cache
    assert len(c2.questions()) == N - 5
    acc = json.loads((out / "accuracy.json").read_text())
    assert {k: acc["pairs"][0][k] for k in ("n", "both", "a_only", "b_only", "neither")} == \
        {"n": N, "both": 4, "a_only": 6, "b_only": 2, "neither": 0}


def test_items_and_a_task_together_pool_and_split_by_task(tmp_path, task_dir):
    """--items and --tasks in one run: accuracy.json pools both, run.json by_task splits them."""
    from tests.accuracy.test_cli import write_items

    a, b = ScriptedServer(numbered(A_RIGHT)), ScriptedServer(numbered(B_RIGHT))
    out = tmp_path / "out"
    items = write_items(tmp_path / "items.jsonl", 5)
    try:
        rc = main(["--endpoint", f"a={a.url}", "--endpoint", f"b={b.url}", "--tasks", "acc_local_gen",
                   "--items", str(items), "--task-path", str(task_dir), "--out", str(out)], echo=lambda s: None)
    finally:
        a.stop(), b.stop()
    assert rc == 0
    acc = json.loads((out / "accuracy.json").read_text())
    by_task = json.loads((out / "run.json").read_text())["by_task"]
    assert acc["backends"]["b"]["n"] == N + 5 and acc["backends"]["b"]["correct"] == len(B_RIGHT) + 4
    assert by_task["items"]["backends"]["b"]["n"] == 5 and by_task["acc_local_gen"]["backends"]["b"]["n"] == N
    assert by_task["acc_local_gen"]["pairs"][0]["a_only"] == 6


def test_loglikelihood_task_through_completions_with_echo(tmp_path, task_dir):
    """multiple_choice through local-completions: the servers serve /v1/completions with echo;
    a local tokenizer (--tokenizer) counts the context's tokens."""
    a = ScriptedServer(numbered(A_RIGHT), echo_logprobs=prefers(A_RIGHT))
    b = ScriptedServer(numbered(B_RIGHT), echo_logprobs=prefers(B_RIGHT))
    out = tmp_path / "out"
    try:
        rc = main(["--endpoint", f"a={a.url}", "--endpoint", f"b={b.url}", "--tasks", "acc_local_mc",
                   "--task-path", str(task_dir), "--tokenizer", str(task_dir.parent / "tokenizer"),
                   "--out", str(out), "--concurrency", "1"], echo=lambda s: None)
    finally:
        a.stop(), b.stop()
    assert rc == 0
    acc = json.loads((out / "accuracy.json").read_text())
    assert acc["backends"]["a"]["correct"] == len(A_RIGHT) and acc["backends"]["b"]["correct"] == len(B_RIGHT)
    assert {k: acc["pairs"][0][k] for k in ("n", "both", "a_only", "b_only", "neither")} == \
        {"n": N, "both": 4, "a_only": 6, "b_only": 2, "neither": 0}
    sent = [x for x in a.bodies if x["path"].endswith("/v1/completions") and x.get("max_tokens") == 1]
    assert len(sent) >= 2 * N and all(x["echo"] is True and x["temperature"] == 0 for x in sent)
    assert not [x for x in a.bodies if "messages" in x]  # no chat request for a log-likelihood task
    run = json.loads((out / "run.json").read_text())
    assert run["tasks"]["acc_local_mc"]["scoring"]["acc_local_mc"] == "acc under filter none"
    recs = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    for r in recs:  # extracted = the choice the backend ranked first (0 = the right one)
        i = int(r["id"])
        assert r["extracted"] == (0 if i in (A_RIGHT if r["backend"] == "a" else B_RIGHT) else 1)
        assert len(json.loads(r["response"])) == 2


class _FakeSession:
    """A boto3 Session stand-in: client(name) returns the fake for that service."""

    def __init__(self, **clients):
        self.clients, self.asked = clients, []

    def client(self, name, config=None):
        self.asked.append((name, config.region_name if config else None))
        return self.clients[name]


def test_bedrock_and_sagemaker_reach_lm_eval_through_the_gateway(tmp_path, task_dir):
    """Stage path: a Bedrock and a SageMaker endpoint (clients injected) answer a generative lm-eval
    task through the local chat gateway; the log-likelihood task is reported as not runnable."""
    import io

    from harness.accuracy.cli import check_options
    from harness.accuracy.stage import add_stage_options, run_stage
    from harness.endpoint import Endpoint

    def question(msgs):
        return [m for m in msgs if m["role"] == "user"][-1]

    class Bedrock:
        def converse(self, **kw):
            text = question(kw["messages"])["content"][0]["text"]
            return {"output": {"message": {"content": [{"text": numbered(A_RIGHT)(text)}]}}}

    class SageMaker:
        def invoke_endpoint(self, **kw):
            text = question(json.loads(kw["Body"])["messages"])["content"]
            reply = {"choices": [{"message": {"content": numbered(B_RIGHT)(text)}}]}
            return {"Body": io.BytesIO(json.dumps(reply).encode())}

    import argparse

    p = argparse.ArgumentParser()
    add_stage_options(p)
    a = p.parse_args(["--accuracy-tasks", "acc_local_gen,acc_local_mc", "--accuracy-task-path", str(task_dir)])
    opts = check_options(a, "accuracy-")
    eps = [Endpoint("bedrock", "bedrock", "amazon.nova-micro-v1:0", region="us-east-1", service="bedrock"),
           Endpoint("sagemaker", "sagemaker", "google/gemma", region="us-west-2", endpoint_name="ep",
                    service="sagemaker")]
    session = _FakeSession(**{"bedrock-runtime": Bedrock(), "sagemaker-runtime": SageMaker()})
    status = run_stage(eps, tmp_path, opts, boto_session=session, echo=lambda s: None)
    assert status == "incomplete (0/2 endpoints complete): bedrock, sagemaker (reasons in accuracy/run.json)"
    assert ("bedrock-runtime", "us-east-1") in session.asked and ("sagemaker-runtime", "us-west-2") in session.asked
    acc = json.loads((tmp_path / "accuracy/accuracy.json").read_text())
    assert acc["backends"]["bedrock"]["correct"] == len(A_RIGHT) and acc["backends"]["sagemaker"]["n"] == N
    assert {k: acc["pairs"][0][k] for k in ("both", "a_only", "b_only", "neither")} == \
        {"both": 4, "a_only": 6, "b_only": 2, "neither": 0}
    run = json.loads((tmp_path / "accuracy/run.json").read_text())
    assert {(s["backend"], s["task"]) for s in run["skipped"]} == {("bedrock", "acc_local_mc"), ("sagemaker", "acc_local_mc")}
    assert all("the bedrock API" in s["reason"] or "the sagemaker API" in s["reason"] for s in run["skipped"])
    assert run["backends"]["bedrock"]["label"] == "bedrock · amazon.nova-micro-v1:0"


def test_tasks_without_lm_eval_installed_is_one_line(tmp_path, monkeypatch, capsys):
    import sys

    from harness.accuracy import lmeval

    monkeypatch.setitem(sys.modules, "lm_eval.tasks", None)  # import fails as if not installed
    monkeypatch.setattr(lmeval, "_MANAGERS", {})
    assert main(["--endpoint", "a=http://127.0.0.1:9/v1", "--tasks", "gsm8k", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "requirements-accuracy.txt" in err


def test_lm_eval_reaches_a_server_that_refuses_seed_and_stop(tmp_path, task_dir):
    """The kit's Neuron engine refuses seed and stop (400): lm-eval goes through the gateway."""
    a = ScriptedServer(numbered(A_RIGHT), refuse=("seed", "stop"))
    out = tmp_path / "out"
    try:
        rc = main(["--endpoint", f"a={a.url}", "--tasks", "acc_local_gen", "--task-path", str(task_dir),
                   "--out", str(out)], echo=lambda s: None)
    finally:
        a.stop()
    assert rc == 0
    acc = json.loads((out / "accuracy.json").read_text())
    assert acc["backends"]["a"]["n"] == N and acc["backends"]["a"]["correct"] == len(A_RIGHT)
    info = json.loads((out / "run.json").read_text())["backends"]["a"]
    assert info["lm_eval_via"].startswith("local gateway") and "not supported" in info["lm_eval_via"]
    answered = [b for b in a.bodies if "messages" in b and "seed" not in b and "stop" not in b]
    assert sorted(q["messages"][-1]["content"] for q in answered) == \
        sorted(f"Q{i}: what is {i} plus {i}?" for i in range(N))


def test_filter_option_scores_by_another_filter(tmp_path, task_dir):
    """--filter first-number: the reply's first number ('Adding i and i') is the answer only for
    i = 0, so each backend scores 1 item of 12 under it."""
    a, b = ScriptedServer(numbered(A_RIGHT)), ScriptedServer(numbered(B_RIGHT))
    out = tmp_path / "out"
    try:
        rc = main(["--endpoint", f"a={a.url}", "--endpoint", f"b={b.url}", "--tasks", "acc_local_gen",
                   "--task-path", str(task_dir), "--filter", "first-number", "--out", str(out)], echo=lambda s: None)
    finally:
        a.stop(), b.stop()
    assert rc == 0
    acc = json.loads((out / "accuracy.json").read_text())
    assert acc["backends"]["a"]["correct"] == 1 and acc["backends"]["b"]["correct"] == 1
    run = json.loads((out / "run.json").read_text())
    assert run["tasks"]["acc_local_gen"]["scoring"]["acc_local_gen"] == "exact_match under filter first-number"
