"""The Neuron slot runner driven by the real scheduler against a stand-in for an NxD Inference 0.8
model compiled for continuous batching: context encoding of one sequence into the KV line its
``seq_ids`` names, then one token-generation call per step over the live slots.

The stand-in takes ``NeuronBaseForCausalLM.forward``'s parameters as NxDI 0.8.0 declares them and
checks every call the way that release handles it (source: aws-neuron/neuronx-distributed-inference
commit cd3abf30558fe1a14dadfb1397c2118e3fcfcc11, "Neuron SDK Release 2.28.0", ``_version.py`` 0.8.0;
no 0.8 tag exists; paths under ``src/neuronx_distributed_inference/``):

- context encoding when ``position_ids.min() == 0`` (``models/model_base.py`` ``_is_prefill``, l.3591);
  one sequence only in continuous batching (``modules/kvcache/kv_cache_manager.py`` l.489:
  "only supports single seq_id"); padded to the first context bucket larger than the prompt
  (``models/model_wrapper.py`` ``_get_seq_bucket`` l.898-912);
- token generation: rows in ``seq_ids`` order, missing lines filled by repeating the first row,
  which therefore writes that row's token into every line not in the call (``_forward_with_pad``
  l.569-648, "repeat_first_batchline"); a full batch runs as given (l.1342); the mask is what
  ``_infer_attention_mask`` (``models/model_base.py`` l.3530) builds from the positions; the
  token-generation bucket is the first larger than the mask width (``get_target_bucket``, l.826);
- logits (no on-device sampling) of the last position only, (rows, 1, vocab), in ``seq_ids`` order.

Its "model" computes each next token from what its KV line holds at the positions the mask lets it
see, so a row sent to the wrong line, a wrong position or a wrong mask gives wrong tokens. The
signature, the prefill test, the mask and the bucket rule are also checked against the 0.8 source
vendored in tests/neuron/vendored_nxdi_0_8 (its functions compiled and run here).
"""
from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
from pathlib import Path
from typing import Optional

import pytest

torch = pytest.importorskip("torch", reason="the engine's runners need torch")

from ami.neuron.nxdi_slots import NxDISlotRunner  # noqa: E402
from ami.neuron.scheduler import BatchScheduler, PromptLogprobs, Row  # noqa: E402

# NeuronBaseForCausalLM.forward at NxDI 0.8.0 (models/model_base.py line 3355), in order.
FORWARD_PARAMS = ("input_ids", "seq_ids", "attention_mask", "position_ids", "past_key_values",
                  "inputs_embeds", "sampling_params", "prev_hidden", "labels", "use_cache",
                  "output_attentions", "output_hidden_states", "adapter_ids", "medusa_args",
                  "return_dict", "llava_args", "input_capture_hook", "slot_mapping", "block_table",
                  "full_context_lens", "computed_context_lens", "tf_args")
VOCAB = 97


def next_token(seq: list[int]) -> int:
    """The stand-in's model: a function of the whole sequence so far."""
    return (sum((i + 1) * t for i, t in enumerate(seq)) + 7) % VOCAB


def reference(prompt: list[int], n: int) -> list[int]:
    seq, out = list(prompt), []
    for _ in range(n):
        out.append(next_token(seq))
        seq.append(out[-1])
    return out


def infer_attention_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """NxDI 0.8 ``_infer_attention_mask`` for one new token per row (model_base.py l.3530-3549)."""
    batch_size = position_ids.shape[0]
    seq_len = int(torch.max(position_ids))
    position_ids_to_compare = position_ids.expand(batch_size, seq_len) - 1
    mask = torch.arange(seq_len).view(1, -1).expand(batch_size, seq_len)
    return (position_ids_to_compare >= mask).to(dtype=position_ids.dtype)


def first_fit(buckets, length: int) -> int:
    """NxDI 0.8 ``_get_seq_bucket`` with strategy first_fit (model_wrapper.py l.898-912)."""
    for b in buckets:
        if length < b:
            return b
    if length == buckets[-1]:
        return buckets[-1]
    raise ValueError(f"Input len {length} exceeds largest bucket ({buckets[-1]})")


class Out:
    def __init__(self, logits):
        self.logits = logits


class StubNxDIModel:
    """An NxDI 0.8 causal LM compiled with is_continuous_batching=True, ctx_batch_size=1,
    tkg_batch_size=batch, context buckets ``ctx`` and token-generation buckets ``tkg``."""

    def __init__(self, batch=4, ctx=(16, 64), tkg=(128, 256)):
        self.batch, self.ctx, self.tkg = batch, ctx, tkg
        self.kv = {line: {} for line in range(batch)}  # line -> {position: token}
        self.calls: list[tuple] = []

    def __call__(self, input_ids=None, seq_ids=None, attention_mask=None, position_ids=None,
                 past_key_values=None, inputs_embeds=None, sampling_params=None, prev_hidden=None,
                 labels=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                 adapter_ids=None, medusa_args=None, return_dict=None, llava_args=[],
                 input_capture_hook=None, slot_mapping=None, block_table=None,
                 full_context_lens=None, computed_context_lens=None, tf_args=None):
        n = input_ids.shape[0]
        for t in (input_ids, seq_ids, attention_mask, position_ids):
            assert t is not None and not t.is_floating_point()
        assert seq_ids.shape == (n,) and position_ids.shape == input_ids.shape
        assert sampling_params.shape == (n, 3)  # prepare_sampling_params: [top_k, top_p, temperature]
        lines = seq_ids.tolist()
        if int(position_ids.min()) == 0:  # _is_prefill: context encoding
            assert n == 1, "only supports single seq_id"
            length = input_ids.shape[1]
            tokens = input_ids[0].tolist()
            if attention_mask[0, 1:].sum() == 0 and length > 1:
                # A one-token prompt fills the largest bucket at position 0 (nxdi_slots.py): no
                # row is padded, so NxDI's gather at the first maximum position is its row 0.
                assert length == self.ctx[-1] and position_ids.tolist() == [[0] * length]
                assert tokens == [tokens[0]] * length
                length, bucket = 1, self.ctx[-1]
                tokens = tokens[:1]
                self.kv[lines[0]] = {p: tokens[0] for p in range(bucket)}  # copies, overwritten by decode
                self.calls.append(("context", lines[0], length, bucket))
                seen = [tokens]
                return self._logits(n, seen)
            assert attention_mask.tolist() == [[1] * length]
            assert position_ids.tolist() == [list(range(length))]
            bucket = first_fit(self.ctx, length)
            # the whole bucket is written: positions past the prompt hold padding
            self.kv[lines[0]] = {p: (tokens[p] if p < length else 0) for p in range(bucket)}
            self.calls.append(("context", lines[0], length, bucket))
            seen = [tokens]
        else:  # token generation
            assert input_ids.shape[1] == 1 and lines == sorted(set(lines)) and n <= self.batch
            assert torch.equal(attention_mask, infer_attention_mask(position_ids))
            bucket = first_fit(self.tkg, attention_mask.shape[1])
            pos, toks = position_ids[:, 0].tolist(), input_ids[:, 0].tolist()
            seen = []
            for i, line in enumerate(lines):
                visible = [self.kv[line][p] for p in range(pos[i]) if attention_mask[i, p]]
                seen.append(visible + [toks[i]])
                self.kv[line][pos[i]] = toks[i]
            for line in range(self.batch):  # padding rows repeat the first row, into free lines
                if line not in lines:
                    self.kv[line][pos[0]] = toks[0]
            self.calls.append(("generation", tuple(lines), bucket))
        return self._logits(n, seen)

    @staticmethod
    def _logits(n, seen):
        logits = torch.full((n, 1, VOCAB), -30.0)
        for i, seq in enumerate(seen):
            logits[i, 0, next_token(seq)] = 30.0
        return Out(logits)


NXDI08 = Path(__file__).parent / "vendored_nxdi_0_8" / "src" / "neuronx_distributed_inference"  # PROVENANCE.md there


def vendored(path: str, cls: str, name: str):
    """(source, function) of ``cls.name`` in the vendored NxDI 0.8 file, compiled on its own."""
    text = (NXDI08 / path).read_text()
    node = next(f for c in ast.parse(text).body if isinstance(c, ast.ClassDef) and c.name == cls
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == name)
    source = textwrap.dedent(ast.get_source_segment(text, node))
    scope = {"torch": torch, "Optional": Optional}
    exec(compile(source, f"{path}:{cls}.{name}", "exec"), scope)  # noqa: S102 - runs NxD Inference 0.8's own method, read from its recorded source
    return node, scope[name]


def test_stub_takes_nxdi_08_forward_parameters():
    node, _ = vendored("models/model_base.py", "NeuronBaseForCausalLM", "forward")
    assert tuple(a.arg for a in node.args.args[1:]) == FORWARD_PARAMS
    params = tuple(inspect.signature(StubNxDIModel.__call__).parameters)[1:]
    assert params == FORWARD_PARAMS


def test_the_rules_the_stub_applies_are_nxdi_08s_own():
    """The stub's prefill test, mask and bucket rules against the vendored 0.8 functions."""
    _, is_prefill = vendored("models/model_base.py", "NeuronBaseForCausalLM", "_is_prefill")
    assert is_prefill(None, torch.tensor([[0, 1, 2]])) and not is_prefill(None, torch.tensor([[5], [3]]))
    _, infer = vendored("models/model_base.py", "NeuronBaseForCausalLM", "_infer_attention_mask")
    for pos in ([[5], [3], [9]], [[1]], [[130], [7]]):
        p = torch.tensor(pos, dtype=torch.int32)
        assert torch.equal(infer(None, p), infer_attention_mask(p))
    _, seq_bucket = vendored("models/model_wrapper.py", "ModelWrapper", "_get_seq_bucket")
    wrapper = type("W", (), {"neuron_config": type("NC", (), {"allow_input_truncation": False})()})()
    for length in (1, 15, 16, 17, 63, 64):
        assert seq_bucket(wrapper, [16, 64], length, 0, "first_fit") == first_fit((16, 64), length)
    assert "only supports single seq_id" in (NXDI08 / "modules/kvcache/kv_cache_manager.py").read_text()
    assert 'pad_type="repeat_first_batchline"' in (NXDI08 / "models/model_wrapper.py").read_text()


def row(prompt, n, **kw):
    return Row(list(prompt), n, 0.0, 1.0, frozenset(), **kw)


async def collect(it, seen=None):
    out = []
    async for item in it:
        out.append(item)
        if seen is not None:
            seen.append(len(out))
    return out


def test_context_encoding_by_slot_and_one_generation_call_per_step_over_the_live_slots():
    model = StubNxDIModel()
    runner = NxDISlotRunner(model, slots=4, largest_bucket=model.ctx[-1])
    longs = [list(range(3, 23)), list(range(40, 80))]  # 20 and 40 tokens: buckets 64 and 64
    short = [5, 9, 2]  # 3 tokens: bucket 16, its own, not the longest prompt's

    async def main():
        s = BatchScheduler(runner, max_total=256, wait_s=0.0)
        await s.start()
        progress = [[], []]
        tasks = [asyncio.ensure_future(collect(s.submit(row(p, 120)), progress[k])) for k, p in enumerate(longs)]
        while min(len(p) for p in progress) < 10:
            await asyncio.sleep(0.001)
        joined = await collect(s.submit(row(short, 8)))
        at_join_end = [len(p) for p in progress]
        echo = await collect(s.submit(row([11, 12, 13, 14], 2, logprobs=0, prompt_logprobs=0)))
        out = await asyncio.gather(*tasks)
        await s.stop()
        return out, joined, at_join_end, echo, s.stats()

    out, joined, at_join_end, echo, stats = asyncio.run(main())
    assert out == [reference(p, 120) for p in longs] and joined == reference(short, 8)
    assert max(at_join_end) < 120  # the short request came and went while the long ones decoded

    contexts = [c for c in model.calls if c[0] == "context"]
    assert contexts[:3] == [("context", 0, 20, 64), ("context", 1, 40, 64), ("context", 2, 3, 16)]
    generations = [c for c in model.calls if c[0] == "generation"]
    assert len(generations) == stats["steps"]  # one token-generation call per decode step
    i = model.calls.index(("context", 2, 3, 16))
    assert model.calls[i - 1][:2] == ("generation", (0, 1))  # joined between two steps...
    assert model.calls[i + 1][:2] == ("generation", (0, 1, 2))  # ...and decoded with them next
    rows = sum(len(c[1]) for c in generations)
    # every live row is in every step: 119 + 119 + 7 steps after the first tokens, plus echo's
    # 3 prompt tokens fed one per step (its prefill is its first token) and 1 more token
    assert rows == 119 + 119 + 7 + 3 + 1
    assert {c[2] for c in generations} == {128, 256}  # buckets by the longest live row, as NxDI picks

    head, *tokens = echo
    assert isinstance(head, PromptLogprobs) and [e.token for e in head.entries[1:]] == [12, 13, 14]
    # echo with logprobs: a one-token context encoding, sent as the largest bucket (nxdi_slots.py)
    assert ("context", 2, 1, 64) in contexts
    assert [t.token for t in tokens] == reference([11, 12, 13, 14], 2)


class DeviceSamplingModel:
    """An NxDI 0.8 causal LM compiled with on-device sampling and output_logits: it answers with
    ``_construct_output_with_tokens_and_logits`` (models/model_base.py l.3842): ``tokens`` (one per
    row, in seq_ids order) and ``logits`` (rows, 1, vocab). Records the sampling_params it got."""

    def __init__(self) -> None:
        from types import SimpleNamespace

        from ami.neuron.neuron_config import SAMPLING

        # NxDI turns the kwargs dict into an OnDeviceSamplingConfig with these attributes
        self.neuron_config = SimpleNamespace(on_device_sampling_config=SimpleNamespace(**SAMPLING))
        self.params: list = []

    def __call__(self, input_ids=None, seq_ids=None, attention_mask=None, position_ids=None,
                 sampling_params=None, **_):
        from types import SimpleNamespace

        self.params.append(sampling_params.tolist())
        rows = seq_ids.shape[0]
        logits = torch.zeros((rows, 1, VOCAB))
        for i, line in enumerate(seq_ids.tolist()):
            logits[i, 0, line] = 1.0  # row i's logits name its KV line
        return SimpleNamespace(tokens=seq_ids.clone() + 50, logits=logits)


def test_device_sampling_sends_each_rows_parameters_and_returns_logits_only_when_asked():
    from ami.neuron.neuron_config import GLOBAL_TOPK
    from ami.neuron.scheduler import DeviceOut

    model = DeviceSamplingModel()
    runner = NxDISlotRunner(model, slots=4, largest_bucket=64)
    assert runner.device_sampling and runner.global_topk == GLOBAL_TOPK
    for slot in (2, 0):
        out = runner.prefill(slot, [5, 6, 7], sampling=[(64, 0.95, 1.0)], want_logits=[False])
        assert isinstance(out, DeviceOut) and out.logits is None and out.tokens.tolist() == [50 + slot]
    # rows come in the caller's order (slot 2, then 0); the device gets them in seq_ids order
    out = runner.decode([2, 0], [9, 9], sampling=[(0, 0.9, 0.7), (1, 1.0, 1.0)], want_logits=[True, False])
    assert model.params[-1] == [[1.0, 1.0, 1.0], [float(GLOBAL_TOPK), pytest.approx(0.9), pytest.approx(0.7)]]
    assert out.tokens.tolist() == [52, 50]  # back in the caller's order
    assert out.logits is not None and out.logits.argmax(-1).tolist() == [2, 0]
    out = runner.decode([2, 0], [9, 9], sampling=[(1, 1.0, 1.0)] * 2, want_logits=[False, False])
    assert out.logits is None  # no row asked: the host gets tokens only
