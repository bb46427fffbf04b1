"""Per-row sampling, detokenization, the chat template, and the CPU generator loading a
checkpoint directory."""
from __future__ import annotations

import torch

from ami.neuron.batch_ops import RowSampler
from ami.neuron.chat import ChatFormat
from ami.neuron.scheduler import Row


def row(prompt, max_new=4, temperature=0.0, top_p=1.0, stop=()):
    got = []
    r = Row(list(prompt), max_new, temperature, top_p, frozenset(stop), emit=got.append)
    return r, got


def test_sampler_is_per_row():
    rows = [row([1], temperature=0.0)[0], row([1], temperature=1.0, top_p=0.5)[0], row([1], temperature=2.0)[0]]
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]] * 3)
    s = RowSampler(rows, 4)  # one filler row, greedy
    out = s(None, torch.cat([logits, logits[:1]]))
    assert torch.isinf(out[0]).tolist() == [True, False, True, True]  # greedy: only the best
    assert torch.isinf(out[1]).tolist() == [True, False, True, True]  # top-p 0.5 keeps the top token
    assert not torch.isinf(out[2]).any() and torch.allclose(out[2], logits[2] / 2)
    assert RowSampler.sample(out).tolist()[:2] == [1, 1]


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


def test_cpu_threads_default_leaves_half_the_cores_to_the_server_and_client():
    from ami.neuron.cpu_generator import default_threads

    assert [default_threads(c) for c in (1, 2, 3, 4, 8, 64)] == [1, 1, 1, 2, 4, 4]
