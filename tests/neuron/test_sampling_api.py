"""What real clients send, through the OpenAI Python SDK, against the CPU engine on the tiny random
Gemma 4: stop strings, n, seeds with sampling, logit_bias and penalties, with vLLM's result shapes.
The penalties' arithmetic is checked against vLLM's formulas on the sampler itself."""
from __future__ import annotations

import concurrent.futures as cf

import openai
import pytest

torch = pytest.importorskip("torch", reason="the engine's sampler needs torch")

from ami.neuron.batch_ops import RowSampler  # noqa: E402
from ami.neuron.scheduler import Row  # noqa: E402

MODEL = "tiny-random-gemma4"
HELLO = [{"role": "user", "content": "The quick brown fox"}]


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server + "/v1", api_key="unused", timeout=60, max_retries=0)


def _greedy_chat(client, **kw):
    return client.chat.completions.create(model=MODEL, messages=HELLO, temperature=0, max_tokens=24,
                                          extra_body={"ignore_eos": True, **kw.pop("extra_body", {})}, **kw)


def _stop_in(text: str) -> str:
    """A stop string from the middle of ``text`` (so it may span token boundaries)."""
    for start in range(len(text) // 3, len(text) - 3):
        s = text[start:start + 3]
        if text.index(s) == start and s.strip():
            return s
    pytest.skip("the tiny model's greedy text has no unique 3-character piece")


def test_chat_stop_string_cuts_before_it_with_vllms_shape(client):
    full = _greedy_chat(client).choices[0].message.content
    stop = _stop_in(full)
    r = _greedy_chat(client, stop=[stop, "never-seen-string"])
    choice = r.choices[0]
    assert choice.message.content == full[:full.index(stop)]
    assert choice.finish_reason == "stop" and choice.model_extra["stop_reason"] == stop
    kept = _greedy_chat(client, stop=stop, extra_body={"include_stop_str_in_output": True}).choices[0]
    assert kept.message.content == full[:full.index(stop) + len(stop)]
    # streamed: the deltas add up to the same text, and none carries the stop string
    chunks = list(_greedy_chat(client, stop=[stop], stream=True))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(deltas) == full[:full.index(stop)] and not any(stop in d for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_completions_stop_string_on_every_prompt(client):
    def run(**kw):
        return client.completions.create(model=MODEL, prompt=["One two", "three four"], temperature=0,
                                         max_tokens=24, extra_body={"ignore_eos": True}, **kw)

    full = [c.text for c in run().choices]
    stop = _stop_in(full[0])
    cut = run(stop=stop)
    for c, text in zip(cut.choices, full):
        assert c.text == (text[:text.index(stop)] if stop in text else text)
        assert c.finish_reason == ("stop" if stop in text else "length")


def test_n_gives_n_choices_counted_once_for_the_prompt(client):
    one = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, temperature=1.0, seed=11,
                                         extra_body={"ignore_eos": True})
    two = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, temperature=1.0, n=2, seed=11,
                                         extra_body={"ignore_eos": True})
    assert [c.index for c in two.choices] == [0, 1]
    assert two.usage.prompt_tokens == one.usage.prompt_tokens
    assert two.usage.completion_tokens == 16
    # vLLM seeds sequence j of a seeded request with seed + j
    assert two.choices[0].message.content == one.choices[0].message.content
    alone_12 = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, temperature=1.0, seed=12,
                                              extra_body={"ignore_eos": True})
    assert two.choices[1].message.content == alone_12.choices[0].message.content
    comp = client.completions.create(model=MODEL, prompt=["a b", "c d"], n=3, max_tokens=4, temperature=1.0,
                                     extra_body={"ignore_eos": True})
    assert [c.index for c in comp.choices] == list(range(6))


def test_a_seeded_sampled_request_repeats_whatever_shares_its_batch(client):
    def seeded():
        return client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=16, temperature=1.0,
                                              top_p=0.9, seed=1234, extra_body={"ignore_eos": True})

    def noise(i):
        return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"other {i}"}],
                                              max_tokens=12 + i, temperature=1.0, extra_body={"ignore_eos": True})

    alone = seeded().choices[0].message.content
    with cf.ThreadPoolExecutor(4) as pool:
        others = [pool.submit(noise, i) for i in range(3)]
        crowded = pool.submit(seeded)
        assert crowded.result().choices[0].message.content == alone
        [f.result() for f in others]
    unseeded = {client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=16, temperature=1.0,
                                               extra_body={"ignore_eos": True}).choices[0].message.content
                for _ in range(3)}
    assert len(unseeded) > 1  # without a seed, sampling differs


def test_logit_bias_forces_a_token(client):
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=5, temperature=0,
                                  logit_bias={"300": 100}, logprobs=1, extra_body={"ignore_eos": True})
    tokens = r.choices[0].logprobs.tokens
    assert len(tokens) == 5 and len(set(tokens)) == 1


def _row(temperature: float = 1.0, top_p: float = 1.0, **kw) -> Row:
    return Row([1], 10, temperature, top_p, frozenset(), **kw)


def test_penalties_are_vllms_formulas():
    """vLLM apply_penalties: repetition divides positive / multiplies negative logits of tokens in
    prompt or output; frequency subtracts penalty x output count; presence subtracts it once."""
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    prompt, output = [4, 5], [5, 6, 6, 6]
    rows = [_row(repetition_penalty=1.3), _row(frequency_penalty=0.5, presence_penalty=0.25),
            _row(logit_bias=((7, 3.0),))]
    got = RowSampler(rows, 3, [(prompt, output)] * 3)._process(logits)
    want = logits.clone()
    for t in {4, 5, 6}:
        v = want[0, t]
        want[0, t] = v / 1.3 if v > 0 else v * 1.3
    for t, count in ((5, 1), (6, 3)):
        want[1, t] -= 0.5 * count + 0.25
    want[2, 7] += 3.0
    assert torch.allclose(got, want)


def test_top_k_keeps_the_k_best():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0]])
    out = RowSampler([_row(top_k=2)], 1)(None, logits)
    assert torch.isfinite(out).tolist() == [[False, True, False, True, False]]


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (3, 1.0), (0, 0.8), (2, 0.9)])
def test_draw_samples_the_distribution_vllm_defines(top_k, top_p):
    """20,000 seeded draws from a 5-token vocabulary at temperature 0.7 land within 0.015 of
    softmax(logits / T) restricted to the top-k, then to the smallest prefix reaching top_p."""
    x = torch.tensor([[1.0, 2.0, 0.5, -1.0, 0.0]])
    probs = (x[0] / 0.7).softmax(-1)
    order = probs.argsort(descending=True)
    keep = torch.zeros(5, dtype=torch.bool)
    mass = 0.0
    for rank, tok in enumerate(order.tolist()):
        if (top_k and rank >= top_k) or mass >= top_p:
            break
        keep[tok], mass = True, mass + float(probs[tok])
    want = probs * keep / float((probs * keep).sum())
    s = RowSampler([_row(temperature=0.7, top_p=top_p, top_k=top_k)], 1, [([1], [])])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(5)
    for _ in range(20000):
        counts[s.draw(x, [g])[0]] += 1
    assert torch.allclose(counts / 20000, want, atol=0.015), (counts / 20000, want)


def test_draw_is_argmax_for_greedy_rows_at_the_real_vocabulary():
    torch.manual_seed(1)
    logits = torch.randn(3, 262_144)
    s = RowSampler([_row(temperature=0.0)] * 3, 3, [([1], [])] * 3)
    assert s.draw(logits) == logits.argmax(-1).tolist()
