"""Per-row batch pieces (padding, sampling, stopping), the Neuron decode loop against a stand-in
for NxDI's adapter, detokenization, and the CPU generator loading a checkpoint directory."""
from __future__ import annotations

import torch

from ami.neuron.batch_ops import RowSampler, RowTracker, pad_batch
from ami.neuron.chat import ChatFormat
from ami.neuron.neuron_generator import NeuronRunner
from ami.neuron.scheduler import Row


def row(prompt, max_new=4, temperature=0.0, top_p=1.0, stop=()):
    got = []
    r = Row(list(prompt), max_new, temperature, top_p, frozenset(stop), emit=got.append)
    return r, got


def test_pad_batch_left_right_and_filler_rows():
    (a, _), (b, _) = row([5, 6, 7]), row([8])
    ids, mask, n = pad_batch([a, b], 0, "left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]] and n == 2
    ids, mask, n = pad_batch([a, b], 0, "right", batch_size=4, filler_id=2)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [2, 0, 0], [2, 0, 0]] and n == 2
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0], [1, 0, 0]]


def test_sampler_is_per_row():
    rows = [row([1], temperature=0.0)[0], row([1], temperature=1.0, top_p=0.5)[0], row([1], temperature=2.0)[0]]
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]] * 3)
    s = RowSampler(rows, 4)  # one filler row, greedy
    out = s(None, torch.cat([logits, logits[:1]]))
    assert torch.isinf(out[0]).tolist() == [True, False, True, True]  # greedy: only the best
    assert torch.isinf(out[1]).tolist() == [True, False, True, True]  # top-p 0.5 keeps the top token
    assert not torch.isinf(out[2]).any() and torch.allclose(out[2], logits[2] / 2)
    assert RowSampler.sample(out).tolist()[:2] == [1, 1]


def test_tracker_streams_and_stops_each_row_on_its_own():
    (a, got_a), (b, got_b) = row([1], max_new=3), row([1], max_new=10, stop={9})
    t = RowTracker([a, b], 3)
    steps = [[4, 9, 0], [5, 0, 0], [6, 0, 0]]
    done = None
    for s in steps:
        done = t(torch.tensor([[1, x] for x in s]))
    assert got_a == [4, 5, 6] and got_b == [9]
    assert done.tolist() == [True, True, True] and t.all_done


class FakeNeuronModel:
    """Stands in for NxDI's compiled model + HuggingFaceGenerationAdapter: next token is
    (last real token + 1). Context encoding on the first call after reset() reads each row's
    last unpadded position, as NxDI does with right padding."""

    def __init__(self, vocab=32):
        self.vocab, self.kv_cache_populated, self.calls = vocab, False, []

    def reset(self):
        self.kv_cache_populated = False

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kw):
        if self.kv_cache_populated:
            input_ids = input_ids[:, -1:]
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def __call__(self, input_ids, attention_mask=None, return_dict=True):
        self.calls.append(tuple(input_ids.shape))
        if self.kv_cache_populated:
            last = input_ids[:, -1]
        else:
            last = input_ids[torch.arange(input_ids.shape[0]), attention_mask.sum(-1) - 1]
        self.kv_cache_populated = True
        nxt = (last + 1) % self.vocab
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -10.0)
        logits[torch.arange(input_ids.shape[0]), -1, nxt] = 10.0
        return type("Out", (), {"logits": logits})()

    def _update_model_kwargs_for_generation(self, out, kwargs, is_encoder_decoder=False):
        m = kwargs["attention_mask"]
        kwargs["attention_mask"] = torch.cat([m.new_ones((m.shape[0], 1)), m], dim=-1)
        return kwargs


def test_neuron_decode_loop_fills_the_compiled_batch_and_streams_each_row():
    fake = FakeNeuronModel()
    runner = NeuronRunner(fake, fake, pad_id=0, filler_id=2, batch_size=4, padding_side="right")
    (a, got_a), (b, got_b) = row([3, 4], max_new=3), row([10], max_new=5, stop={13})
    runner.run([a, b])
    assert got_a == [5, 6, 7] and got_b == [11, 12, 13]
    assert fake.calls[0] == (4, 2) and all(c == (4, 1) for c in fake.calls[1:])  # full batch of 4
    assert len(fake.calls) == 3  # stopped when every real row was done
    runner.run([row([20], max_new=1)[0]])
    assert fake.calls[3] == (4, 1)  # reset() before a new batch: context encoding again


def test_incremental_decoder_never_splits_a_character(tiny_tokenizer):
    chat = ChatFormat.for_tokenizer(tiny_tokenizer)
    text = "déjà vu ✓ <|tool_call>call:f{}<tool_call|> 日本"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    dec = chat.decoder()
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    assert {"<turn|>", "<|tool_response>"} <= {tiny_tokenizer.convert_ids_to_tokens(i) for i in chat.stop_ids}


def test_cpu_generator_serves_a_checkpoint_directory(tmp_path):
    import asyncio

    from ami.neuron import cpu_generator, tiny
    from ami.neuron.generator import Limits, SamplingParams

    tiny.save(str(tmp_path))
    gen = cpu_generator.make_generator("dir-model", str(tmp_path), False, Limits(64, 128, 2), 0.0,
                                     threads=1, dtype="fp32")

    async def main():
        await gen.start()
        try:
            ids = gen.chat.render([{"role": "user", "content": "hi"}], None)
            return ids, [t async for t in gen.generate(ids, SamplingParams(5, 0.0, ignore_eos=True))]
        finally:
            await gen.close()

    ids, out = asyncio.run(main())
    assert tiny_tokenizer_text(gen, ids) == "<bos><|turn>user\nhi<turn|>\n<|turn>model\n"
    assert len(out) == 5


def tiny_tokenizer_text(gen, ids):
    return gen.chat.tokenizer.decode(ids, skip_special_tokens=False)


def test_bundled_template_renders_every_role(tiny_tokenizer):
    chat = ChatFormat.for_tokenizer(tiny_tokenizer)
    msgs = [{"role": "developer", "content": [{"type": "text", "text": " Be brief. "}]},
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1"},
            {"role": "system", "content": "Now in French."},
            {"role": "user", "content": "Q2"}]
    text = tiny_tokenizer.decode(chat.render(msgs, None), skip_special_tokens=False)
    assert text == ("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nQ1<turn|>\n<|turn>model\nA1<turn|>\n"
                    "<|turn>system\nNow in French.<turn|>\n<|turn>user\nQ2<turn|>\n<|turn>model\n")


def test_transformers5_shim_gives_nxd_the_name_it_imports(monkeypatch):
    import sys

    from ami.neuron.neuron_generator import transformers5_shim

    # As with transformers 5 (no transformers.utils.fx); undone after the test.
    monkeypatch.setitem(sys.modules, "transformers.utils.fx", None)
    transformers5_shim()
    from transformers.utils.fx import HFTracer  # what NxD does at import time
    assert isinstance(HFTracer, type)
