"""The BOS offset, end to end: the kit's Neuron engine on CPU (the real CLI) serving the tiny
random Gemma 4 (ami/neuron/tiny.py) with a tokenizer that puts <bos> before a text prompt, as
Gemma's does under vLLM; lm-eval 0.4.13's ``local-chat-completions`` and ``local-completions``
driven by the accuracy stage over items made here.

lm-eval counts a context's tokens without <bos> and reads ``token_logprobs[ctxlen:-1]`` of the
echoed prompt: with text prompts every log-likelihood also held the last context token's (shown
first, on the same server). The stage probes the server, sends token ids with the <bos> in the
context (loglikelihood, multiple_choice) or as the rolling prefix (loglikelihood_rolling), and
every log-likelihood equals the model's own: the same weights run here on <bos> + context +
continuation, summed over the continuation's tokens."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the engine's CPU generator needs torch (requirements-engine.txt)")
pytest.importorskip("lm_eval", reason="requirements-accuracy.txt not installed")

from harness.accuracy import lmeval
from harness.accuracy.cli import main
from harness.accuracy.client import Settings, Target
from harness.accuracy.lmeval import PROBE_TEXT, Echo, Unfit
from tests.neuron.engine_proc import REPO, free_port, wait_healthy

MODEL = "tiny-bos"
MC = [{"question": "The quick brown", "choices": ["fox", "dog", "tool"], "gold": 0},
      {"question": "Hello! How can I help", "choices": ["you today?", "the answer"], "gold": 0},
      {"question": "call:count_ids{ids:[3,12", "choices": [",15]", "]}"], "gold": 1},
      {"question": "response:count_ids{value:", "choices": ["8}", "11}", "OBJECT"], "gold": 0}]
ROLL = [{"text": "The quick brown fox jumps over the lazy dog."},
        {"text": "Hello! How can I help you today? The answer is 8."}]
GEN = [{"idx": i, "answer": str(2 * i)} for i in range(3)]

TASKS = {
    "bos_mc": """output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
""",
    "bos_roll": """output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: byte_perplexity
""",
    "bos_gen": """output_type: generate_until
doc_to_text: "Q{{{{idx}}}}: what is {{{{idx}}}} plus {{{{idx}}}}?"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n", "Q"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 8
metric_list:
  - metric: exact_match
""",
}
HEAD = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
metadata:
  version: 1.0
"""


def bos_tokenizer():
    """The tiny model's tokenizer, with a post-processor that puts <bos> first (as Gemma's)."""
    from tokenizers import processors

    from ami.neuron import tiny

    tok = tiny.build_tokenizer()
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos)])
    assert tok("1,2,3").input_ids[0] == bos and tok("1,2,3", add_special_tokens=False).input_ids[0] != bos
    return tok


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(engine URL, checkpoint directory): the tiny model saved with the <bos> tokenizer (fp32),
    served by ``python -m ami.neuron.server --device cpu --model DIR --dtype fp32``."""
    from ami.neuron import tiny

    d = tmp_path_factory.mktemp("bos") / "model"
    tok = bos_tokenizer()
    tiny.build_model(tok).save_pretrained(str(d))  # tiny.build's weights (seed 0)
    tok.save_pretrained(str(d))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ami.neuron.server", "--device", "cpu", "--model", str(d),
                             "--dtype", "fp32", "--served-model-name", MODEL, "--port", str(port),
                             "--prompt-buckets", "64,256", "--max-total-tokens", "512", "--batch-size", "4",
                             "--batch-wait-ms", "20", "--cpu-threads", "1"],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}/v1", d
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def own(served):
    """The model's own log-likelihood of token ids: the same checkpoint, run here."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(served[1]), dtype=torch.float32).eval()

    def loglik(ids: list[int], n_context: int) -> float:
        with torch.no_grad():
            lp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
        return sum(float(lp[i - 1, ids[i]]) for i in range(n_context, len(ids)))

    return loglik


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    d = tmp_path_factory.mktemp("bos_tasks")
    for name, docs in (("bos_mc", MC), ("bos_roll", ROLL), ("bos_gen", GEN)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs))
        (d / f"{name}.yaml").write_text(HEAD.format(name=name, data=d / f"{name}.jsonl") + TASKS[name].format())
    return d


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


@contextlib.contextmanager
def captured(monkeypatch):
    """lm-eval's results, as the stage gets them from ``simple_evaluate`` (one per call)."""
    import lm_eval

    outs: list[dict] = []
    real = lm_eval.simple_evaluate

    def spy(**kw):
        outs.append(real(**kw))
        return outs[-1]

    monkeypatch.setattr(lm_eval, "simple_evaluate", spy)
    yield outs


def expected_mc(tok, own, context: str, continuation: str) -> tuple[float, float]:
    """(the model's own log-likelihood, the last context token's log-probability) of a pair as
    lm-eval splits it (TemplateLM._encode_pair: the context's trailing spaces go to the
    continuation; the whole is tokenized, the context's count cut from it), <bos> first."""
    n = len(context) - len(context.rstrip())
    context, continuation = context[:len(context) - n], context[len(context) - n:] + continuation
    ctx = tok(context).input_ids
    whole = tok(context + continuation).input_ids
    assert whole[:len(ctx)] == ctx and ctx[0] == tok.bos_token_id
    return own(whole, len(ctx)), own(ctx, len(ctx) - 1)


def test_text_prompts_were_off_by_the_last_context_token(served, own, tasks, offline):
    """Before the fix (the stage's old model args: text prompts, lm-eval's defaults), on the
    same server: each log-likelihood is the model's own plus the last context token's."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    url, d = served
    out = simple_evaluate(model="local-completions", model_args={
        "base_url": url + "/completions", "model": MODEL, "num_concurrent": 1, "max_retries": 1,
        "tokenized_requests": False, "tokenizer_backend": "huggingface", "tokenizer": str(d)},
        tasks=["bos_mc"], task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        log_samples=True, bootstrap_iters=0)
    tok = bos_tokenizer()
    for s in out["samples"]["bos_mc"]:
        for (context, continuation), (ll, _) in zip(s["arguments"], s["filtered_resps"]):
            right, last = expected_mc(tok, own, context, continuation)
            assert last < -1 and ll == pytest.approx(right + last, abs=1e-3), (context, continuation, ll, right)


def test_generate_and_loglikelihood_tasks_through_the_stage_are_the_models_own(served, own, tasks, offline,
                                                                                tmp_path, monkeypatch):
    url, d = served
    out = tmp_path / "out"
    with captured(monkeypatch) as outs:
        rc = main(["--endpoint", f"x={url}", "--tasks", "bos_gen,bos_mc", "--task-path", str(tasks),
                   "--tokenizer", str(d), "--out", str(out), "--concurrency", "2"], echo=lambda s: None)
    assert rc == 0
    run = json.loads((out / "run.json").read_text())
    assert run["schema_version"] == 2 and "lm_eval_via" not in run["backends"]["x"]  # chat: direct, stop taken
    assert run["tasks"]["bos_mc"]["log_likelihood_prompts"]["x"] == \
        "token ids, <bos> (id 2) first: the server puts <bos> before a text prompt"
    recs = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert all(r["schema_version"] == 2 for r in recs)
    gen = [r for r in recs if r["task"] == "bos_gen"]
    assert len(gen) == len(GEN) and all("\n\n" not in r["response"] and "Q" not in r["response"] for r in gen)
    mc = {r["id"]: json.loads(r["response"]) for r in recs if r["task"] == "bos_mc"}
    assert len(mc) == len(MC)
    [samples] = [o["samples"]["bos_mc"] for o in outs if "bos_mc" in o["samples"]]
    tok = bos_tokenizer()
    for s in samples:
        mine = []
        for (context, continuation), (ll, _) in zip(s["arguments"], s["filtered_resps"]):
            right, _last = expected_mc(tok, own, context, continuation)
            assert ll == pytest.approx(right, abs=1e-3), (context, continuation, ll, right)
            mine.append(right)
        assert mc[str(s["doc_id"])] == pytest.approx(mine, abs=1e-3)  # items.jsonl holds the same


def test_rolling_task_through_the_stage_is_the_models_own_with_one_bos(served, own, tasks, offline,
                                                                       tmp_path, monkeypatch):
    """loglikelihood_rolling: lm-eval puts its prefix token before the text itself; the stage
    makes it the server's <bos>, once. (Its metric is not right/wrong per item: no records, the
    task is listed as skipped for that reason.)"""
    url, d = served
    out = tmp_path / "out"
    with captured(monkeypatch) as outs:
        rc = main(["--endpoint", f"x={url}", "--tasks", "bos_roll", "--task-path", str(tasks),
                   "--tokenizer", str(d), "--out", str(out), "--concurrency", "1"], echo=lambda s: None)
    assert rc == 1
    run = json.loads((out / "run.json").read_text())
    [skip] = run["skipped"]
    assert skip["task"] == "bos_roll" and skip["reason"].startswith("metric byte_perplexity is not right/wrong"), skip
    [samples] = [o["samples"]["bos_roll"] for o in outs]
    tok = bos_tokenizer()
    for s in samples:
        text = s["arguments"][0][0]
        ids = tok(text, add_special_tokens=False).input_ids
        [ll] = s["resps"][0]
        assert float(ll) == pytest.approx(own([tok.bos_token_id, *ids], 1), abs=1e-3), text



def test_a_resume_asks_again_what_was_scored_before_the_fix(served, tasks, offline, tmp_path):
    """A directory written before the fix (version 1: each log-likelihood shifted) resumed: the
    backend asked again gets its log-likelihood items re-scored and recorded at version 2; an
    earlier backend's kept answers are marked in run.json (the report shows it)."""
    url, d = served
    out = tmp_path / "out"
    argv = ["--endpoint", f"x={url}", "--tasks", "bos_mc", "--task-path", str(tasks), "--tokenizer", str(d),
            "--out", str(out), "--concurrency", "1"]
    assert main(argv, echo=lambda s: None) == 0
    right = {r["id"]: r["response"] for r in map(json.loads, (out / "items.jsonl").read_text().splitlines())}
    old = [{**r, "schema_version": 1, "response": json.dumps([v - 6 for v in json.loads(r["response"])])}
           for r in map(json.loads, (out / "items.jsonl").read_text().splitlines())]
    old += [{**r, "backend": "y"} for r in old]
    (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    run = json.loads((out / "run.json").read_text())
    run["schema_version"], run["backends"]["y"] = 1, dict(run["backends"]["x"])
    (out / "run.json").write_text(json.dumps(run))
    assert lmeval.uncorrected(out) == {b: {("bos_mc", r["id"], r["prompt_hash"]) for r in old if r["backend"] == b}
                                       for b in ("x", "y")}

    assert main(argv + ["--resume"], echo=lambda s: None) == 0
    recs = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    again = {r["id"]: r for r in recs[len(old):]}
    assert {r["backend"] for r in again.values()} == {"x"} and len(again) == len(MC)
    assert all(r["schema_version"] == 2 and r["response"] == right[i] for i, r in again.items())
    assert lmeval.uncorrected(out) == {"y": {("bos_mc", r["id"], r["prompt_hash"]) for r in old if r["backend"] == "y"}}
    run = json.loads((out / "run.json").read_text())
    assert run["backends"]["y"]["bos_offset"] == "not corrected" and "bos_offset" not in run["backends"]["x"]


# -- what the stage asks lm-eval to send, from the probe (no server) -------------------------
@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """The tiny model's tokenizer as it is (no BOS added) and with <bos> first (as Gemma's)."""
    from ami.neuron import tiny

    d = tmp_path_factory.mktemp("toks")
    tiny.build_tokenizer().save_pretrained(str(d / "plain"))
    bos = bos_tokenizer()
    bos.save_pretrained(str(d / "bos"))
    return {"plain": str(d / "plain"), "bos": str(d / "bos"), "bos_id": bos.bos_token_id,
            "n": len(bos(PROBE_TEXT, add_special_tokens=False).input_ids)}


def _plan(tokenizer: str, echo: Echo, names=("mc", "roll")):
    t = Target("x", "m", "openai", lambda m: "", base_url="http://127.0.0.1:9/v1")
    t.echo = echo
    opts = {"settings": Settings(), "concurrency": 1, "tokenizer": tokenizer}
    return lmeval.completion_plan(t, list(names), {"mc": "multiple_choice", "roll": "loglikelihood_rolling"}, opts)


def test_a_server_that_prepends_bos_gets_token_ids_with_it_once(tokenizers):
    n = tokenizers["n"]
    plan, how = _plan(tokenizers["bos"], Echo(n + 1, ("<bos>", "1", ",", "2", ",", "3")[: n + 1]))
    (c1, p1, a1), (c2, p2, a2) = plan
    assert (c1, p1, a1["tokenized_requests"], a1["add_bos_token"]) == ("completions-ids", ["mc"], True, True)
    assert (c2, p2, a2["tokenized_requests"], a2["add_bos_token"]) == ("rolling-ids", ["roll"], True, False)
    assert a2["custom_prefix_token_id"] == tokenizers["bos_id"] and "custom_prefix_token_id" not in a1
    assert how == f"token ids, <bos> (id {tokenizers['bos_id']}) first: the server puts <bos> before a text prompt"
    # the pieces do not say (ids as strings): one token more than the tokenizer's is a prepended one
    plan2, _ = _plan(tokenizers["bos"], Echo(n + 1, None))
    assert plan2 == plan


def test_a_server_that_adds_nothing_keeps_text_prompts(tokenizers):
    plan, how = _plan(tokenizers["plain"], Echo(tokenizers["n"], ("1", ",", "2", ",", "3")))
    [(cache, names, args)] = plan
    assert cache == "completions" and names == ["mc", "roll"]  # the cache of runs before the fix: still right
    assert args["tokenized_requests"] is False and "add_bos_token" not in args
    assert how.startswith("text")


@pytest.mark.parametrize("which, echo, says", [
    ("plain", lambda n: Echo(n + 1, ("<bos>", "1", ",", "2", ",", "3")), "would not put <bos> before a context"),
    ("bos", lambda n: Echo(n + 3, None), "lm-eval would slice every context's log-probabilities at the wrong token"),
    ("plain", lambda n: Echo(n - 1, ("1", ",", "2", ",3")), "is 4 tokens for the server and 5 for --tokenizer"),
])
def test_a_tokenizer_that_counts_otherwise_is_refused_with_the_reason(tokenizers, which, echo, says):
    with pytest.raises(Unfit, match="pass --tokenizer") as e:
        _plan(tokenizers[which], echo(tokenizers["n"]))
    assert says in str(e.value)
