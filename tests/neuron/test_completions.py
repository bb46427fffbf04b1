"""POST /v1/completions and chat log-probabilities on the real CLI (tiny random Gemma 4), driven
by the OpenAI Python SDK and by lm-evaluation-harness's own ``local-completions`` model; and the
429 a full queue answers."""
from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time

import httpx
import openai
import pytest

from ami.neuron.chat import ChatFormat
from ami.neuron.generator import BatchedGenerator, Limits

from .conftest import InProcessServer
from .fake_slots import FakeSlotRunner

MODEL = "tiny-random-gemma4"


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server + "/v1", api_key="x", max_retries=0, timeout=60)


def test_echo_with_logprobs_covers_the_prompt_then_the_generated_tokens(client):
    r = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=4,
                                  temperature=0, echo=True, logprobs=2, seed=1234,
                                  extra_body={"ignore_eos": True})
    [c] = r.choices
    lp = c.logprobs
    n = r.usage.prompt_tokens + 4
    assert r.object == "text_completion" and r.usage.completion_tokens == 4
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert c.text.startswith("The quick brown fox") and "".join(lp.tokens[:r.usage.prompt_tokens]) == "The quick brown fox"
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(n)]
    for tok, value, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert value <= 0 and top[tok] == value and 1 <= len(top) <= 3  # itself + the 2 most likely
    for value, top in zip(lp.token_logprobs[-4:], lp.top_logprobs[-4:]):
        assert value == max(top.values())  # greedy: each generated token is the most likely one


def test_prompt_and_generated_logprobs_are_the_models_own(client):
    """Echoed prompt tokens (read at prefill) and generated ones (read at each decode step) carry
    the log-probabilities the same tiny model gives when run directly (same seed, same weights)."""
    import torch

    from ami.neuron import tiny

    model, tokenizer = tiny.build()
    ids = [5, 17, 33, 8, 91, 4]
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=3, temperature=0, echo=True, logprobs=1,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    seq, expected = list(ids), [None]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
        expected += [float(logits[i - 1, ids[i]]) for i in range(1, len(ids))]
        for _ in range(3):  # greedy, as the server decodes it
            last = model(torch.tensor([seq])).logits[0, -1].float().log_softmax(-1)
            token = int(last.argmax())
            expected.append(float(last[token]))
            seq.append(token)
    assert lp.tokens == [tokenizer.decode([t]) for t in seq]
    assert lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx(expected[1:], abs=1e-4)


def test_token_id_prompts_give_one_choice_each_and_usage_adds_up(client):
    r = client.completions.create(model=MODEL, prompt=[[5, 6, 7, 8], [9, 10]], max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1] and all(c.logprobs is None for c in r.choices)
    assert r.usage.prompt_tokens == 6 and r.usage.completion_tokens == 6
    assert all(c.finish_reason == "length" for c in r.choices)


def test_streamed_completion_adds_up_to_the_whole_one(client):
    kw = dict(model=MODEL, prompt="Hello there", max_tokens=12, temperature=0, logprobs=1,
              extra_body={"ignore_eos": True})
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert text == whole.choices[0].text and tokens == whole.choices[0].logprobs.tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_chat_logprobs_streamed_and_not(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=0,
              logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    for e in content:
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob == e.logprob  # greedy
        assert e.bytes == list(e.token.encode("utf-8", errors="replace"))
    streamed = [e for c in client.chat.completions.create(**kw, stream=True)
                if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    plain = client.chat.completions.create(**{**kw, "logprobs": None, "top_logprobs": None})
    assert plain.choices[0].logprobs is None


@pytest.mark.parametrize("bad, param", [
    ({"logprobs": 21}, "logprobs"), ({"prompt": []}, "prompt"), ({"prompt": ""}, "prompt"),
    ({"prompt": [[1, 2], [400000]]}, "prompt"), ({"suffix": "x"}, "suffix"), ({"seed": 1.5}, "seed"),
    ({"echo": "yes"}, "echo"), ({"n": 0}, "n"), ({"prompt": "word " * 400}, "prompt"),
    ({"stop": ["x"] * 65}, "stop"), ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"max_tokens": 600}, "max_tokens"),
])
def test_bad_completion_requests_are_400_naming_the_field(client, bad, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**{"model": MODEL, "prompt": "hi", "max_tokens": 2, **bad})
    assert e.value.body["param"] == param


def test_a_full_queue_is_a_429_with_retry_after(tiny_tokenizer):
    gate = threading.Event()
    runner = FakeSlotRunner(slots=1, gate=gate)
    gen = BatchedGenerator("q", ChatFormat.for_tokenizer(tiny_tokenizer), Limits(64, 512, 1), runner,
                           0.0, max_queue=1)
    body = {"model": "q", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    with InProcessServer(gen) as srv, httpx.Client(timeout=20) as c, cf.ThreadPoolExecutor(2) as pool:
        held = pool.submit(c.post, srv.url + "/v1/chat/completions", json=body)
        assert runner.started.wait(10)  # the one slot is taken: its first decode step waits on the gate
        waiting = pool.submit(c.post, srv.url + "/v1/chat/completions", json=body)
        deadline = time.monotonic() + 10
        while gen.stats()["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        full = c.post(srv.url + "/v1/completions", json={"model": "q", "prompt": "x", "max_tokens": 1})
        gate.set()
        assert held.result().status_code == 200 and waiting.result().status_code == 200
    assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
    err = full.json()["error"]
    assert err["code"] == "queue_full" and err["type"] == "rate_limit_error" and "retry later" in err["message"]


def test_more_prompts_than_the_queue_holds_is_a_400_naming_max_queue(tiny_tokenizer):
    """Waiting cannot help a request the queue can never take: not a 429 'retry later' for ever."""
    runner = FakeSlotRunner(slots=2)
    gen = BatchedGenerator("q", ChatFormat.for_tokenizer(tiny_tokenizer), Limits(64, 512, 2), runner,
                           0.0, max_queue=2)
    with InProcessServer(gen) as srv, httpx.Client(timeout=20) as c:
        over = c.post(srv.url + "/v1/completions", json={"model": "q", "prompt": ["p", "p", "p"], "max_tokens": 1})
        fits = c.post(srv.url + "/v1/completions", json={"model": "q", "prompt": ["p", "p"], "max_tokens": 1})
    assert over.status_code == 400 and "Retry-After" not in over.headers
    err = over.json()["error"]
    assert err["param"] == "prompt" and err["code"] == "too_many_prompts" and "--max-queue 2" in err["message"]
    assert fits.status_code == 200 and len(fits.json()["choices"]) == 2


LL_TASK = """task: kit_engine_ll
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
metric_list:
  - metric: acc
metadata:
  version: 1.0
"""


def test_lm_eval_local_completions_runs_a_loglikelihood_task_end_to_end(tiny_server, tmp_path, monkeypatch):
    """lm-eval's own ``local-completions`` model, the tiny model's tokenizer from a local
    directory (offline), a multiple-choice task written here; every log-likelihood lm-eval
    reports equals the one computed directly on the same tiny model."""
    pytest.importorskip("lm_eval", reason="requirements-accuracy.txt not installed")
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from ami.neuron import tiny

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    model, tokenizer = tiny.build()  # the server's own model: same seed, same weights
    tokenizer.save_pretrained(str(tmp_path / "tokenizer"))
    docs = [{"question": "The quick brown", "choices": [" fox", " dog", " tool"], "gold": 0},
            {"question": "Hello! How can I help", "choices": [" you today?", " the answer"], "gold": 0},
            {"question": "call:count_ids{ids:[3,12", "choices": [",15]", "]}"], "gold": 1}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "kit_engine_ll.yaml").write_text(LL_TASK.format(data=tmp_path / "data.jsonl"))

    out = simple_evaluate(
        model="local-completions",
        model_args={"base_url": tiny_server + "/v1/completions", "model": MODEL, "num_concurrent": 1,
                    "max_retries": 1, "tokenizer_backend": "huggingface", "tokenizer": str(tmp_path / "tokenizer")},
        tasks=["kit_engine_ll"], task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        log_samples=True)
    samples = out["samples"]["kit_engine_ll"]
    assert len(samples) == 3 and 0.0 <= out["results"]["kit_engine_ll"]["acc,none"] <= 1.0
    for s in samples:
        for (context, continuation), (ll, _) in zip(s["arguments"], s["filtered_resps"]):
            ctx = tokenizer.encode(context, add_special_tokens=False)
            cont = tokenizer.encode(continuation, add_special_tokens=False)
            with torch.no_grad():
                logits = model(torch.tensor([ctx + cont])).logits[0].float().log_softmax(-1)
            direct = sum(float(logits[len(ctx) - 1 + i, t]) for i, t in enumerate(cont))
            assert ll == pytest.approx(direct, abs=1e-3), (context, continuation)
