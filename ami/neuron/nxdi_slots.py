"""Slots on an NxD Inference model compiled for continuous batching (the Neuron ``SlotRunner``).

The calls are the ones NxD Inference's continuous batching is built for, as vLLM's Neuron
integration makes them (``NeuronCausalLM.forward`` in vllm-project/vllm
``vllm/model_executor/model_loader/neuronx_distributed.py``, commit 02f0c7b2: it calls the
NxDI model with ``input_ids, attention_mask, position_ids, seq_ids, sampling_params`` after
sorting the rows by ``seq_ids``, and compiles with ``ctx_batch_size=1``,
``is_continuous_batching=True``, ``padding_side="right"``).

Facts from NxD Inference 0.8.0 (Neuron SDK 2.28; the repository has no 0.8 tag: release commit
cd3abf30558fe1a14dadfb1397c2118e3fcfcc11 of aws-neuron/neuronx-distributed-inference, "Neuron SDK
Release 2.28.0", where ``_version.py`` says 0.8.0), all under ``src/neuronx_distributed_inference/``:

- ``models/model_base.py`` ``NeuronBaseForCausalLM.forward(self, input_ids=None, seq_ids=None,
  attention_mask=None, position_ids=None, past_key_values=None, inputs_embeds=None,
  sampling_params=None, ...)`` (line 3355) runs context encoding when ``_is_prefill``:
  ``position_ids.min().item() == 0`` (line 3591), else token generation; it returns
  ``CausalLMOutputWithPast`` whose ``logits`` (no on-device sampling) hold the last position
  only: the model gathers the hidden state at ``torch.max(position_ids, dim=1)`` before the LM
  head (line 1014), so shape (batch, 1, vocab).
- ``modules/kvcache/kv_cache_manager.py`` line 489: in continuous batching, context encoding
  writes one sequence into the KV line ``seq_ids`` names: "assert seq_ids.dim() == 1 and
  seq_ids.shape[0] == 1, 'only supports single seq_id'". So a prefill is one row, ``seq_ids``
  of shape (1,).
- ``models/model_wrapper.py`` ``pad_inputs`` (line 725) pads a context-encoding call's
  ``input_ids``/``attention_mask``/``position_ids`` to the first context bucket larger than the
  prompt (``_get_seq_bucket``, "first_fit and required_len < bucket", line 906; the largest
  bucket when the prompt fills it), with ``pad_token_id``, 0 and 1. The engine passes the prompt
  unpadded, so each request pays for its own bucket, not the batch's longest.
- ``models/model_wrapper.py`` ``_forward_with_pad`` (line 569): a token-generation call with
  fewer rows than the compiled batch has its ``seq_ids`` completed with the missing lines,
  sorted, the other inputs padded by repeating the first row, and the output rows picked back by
  ``index_select(logits, 0, seq_ids)``; a full batch runs as given (line 1342), so rows must
  come in ``seq_ids`` order: the runner always sorts by slot.
- ``models/model_base.py`` ``_infer_attention_mask`` (line 3530): for one new token per row,
  mask width ``max(position_ids)`` and ``mask[b, j] = position_ids[b] - 1 >= j``; the engine
  passes exactly that mask (vLLM passes ``attention_mask=None`` and lets NxDI infer it).
- ``modules/generation/sampling.py`` ``prepare_sampling_params(batch_size, top_k=[1],
  top_p=[1.0], temperature=[1.0])`` (line 185) stacks ``[top_k, top_p, temperature]`` per row,
  shape (batch, 3). Compiled with on-device sampling (neuron_config.SAMPLING, ``dynamic``), each
  row's own values go there (top_k 1..global_topk; greedy is top_k 1) and the call returns
  ``tokens`` with the ``logits`` beside them (``output_logits``:
  ``_construct_output_with_tokens_and_logits``, model_base.py l.3842); without it, neutral
  values and logits only (sampling on the host).

Not proven here: nothing in this repository has run on a NeuronCore (see README).
"""
from __future__ import annotations

import torch

from .scheduler import DeviceOut


class NxDISlotRunner:
    prompt_logits = False  # context encoding returns the last position's logits only (see above)

    def __init__(self, model, slots: int, largest_bucket: int) -> None:
        self.model, self.slots = model, slots
        self.largest_bucket = largest_bucket  # the largest context-encoding bucket (max prompt)
        self.next_pos: dict[int, int] = {}  # slot -> position of its next token
        sampling = getattr(getattr(model, "neuron_config", None), "on_device_sampling_config", None)
        # Compiled with on-device sampling (neuron_config.SAMPLING): the call returns a token per
        # row, and the logits beside them (output_logits) for the rows the host samples.
        self.device_sampling = sampling is not None
        self.global_topk = getattr(sampling, "global_topk", 1)

    def _sampling_params(self, rows: int, sampling=None) -> torch.Tensor:
        """(rows, 3): [top_k, top_p, temperature] per row, as prepare_sampling_params stacks them.
        Without device sampling the values are neutral (sampling is on the host); with it, top_k
        0 (off) becomes the device's candidate count, GLOBAL_TOPK."""
        if not self.device_sampling or sampling is None:
            return torch.tensor([[1, 1.0, 1.0]] * rows, dtype=torch.float32)
        return torch.tensor([[min(k, self.global_topk) if k > 0 else self.global_topk, p, t] for k, p, t in sampling],
                            dtype=torch.float32)

    def _result(self, out, order: list[int] | None, want_logits):
        """Logits (host sampling), or DeviceOut(tokens, logits of the rows that want them), in the
        caller's row order."""
        logits = out.logits[:, -1, :].float() if out.logits is not None else None
        back = None
        if order is not None:
            back = torch.empty(len(order), dtype=torch.long)
            back[torch.tensor(order)] = torch.arange(len(order))
        if not self.device_sampling:
            return logits if back is None else logits[back]
        tokens = out.tokens.reshape(-1).long()
        if back is not None:
            tokens = tokens[back]
            logits = logits[back] if logits is not None else None
        return DeviceOut(tokens, logits if want_logits and any(want_logits) else None)

    @torch.inference_mode()
    def prefill(self, slot: int, prompt_ids: list[int], all_logits: bool = False, sampling=None, want_logits=None):
        if all_logits:
            raise ValueError("the compiled context encoding returns the last position's logits only")
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} outside the compiled batch of {self.slots}")
        n = len(prompt_ids)
        ids, mask, pos = list(prompt_ids), [1] * n, list(range(n))
        if n == 1:
            # NxDI pads position_ids with 1 up to the bucket (model_wrapper.py pad_inputs,
            # ``tensor_pad_vals = [pad_token_id, 0, 1]``, l.764 at cd3abf3) and takes the hidden
            # state at the first maximum position (model_base.py l.1011): for a one-token prompt
            # that is a padding row. Only the largest bucket is chosen for its own length
            # (``_get_seq_bucket``: a smaller bucket must exceed the length, l.898-912), so the
            # token fills it at position 0 and nothing is padded. The copies' K/V land in slots
            # that decode steps overwrite before any query sees them (queries attend j < position).
            width = self.largest_bucket
            ids, mask, pos = ids * width, [1] + [0] * (width - 1), [0] * width
        out = self.model(input_ids=torch.tensor([ids], dtype=torch.int32),
                         attention_mask=torch.tensor([mask], dtype=torch.int32),
                         position_ids=torch.tensor([pos], dtype=torch.int32),
                         seq_ids=torch.tensor([slot], dtype=torch.int32),
                         sampling_params=self._sampling_params(1, sampling))
        self.next_pos[slot] = n
        return self._result(out, None, want_logits)

    @torch.inference_mode()
    def decode(self, slots: list[int], tokens: list[int], sampling=None, want_logits=None):
        order = sorted(range(len(slots)), key=lambda i: slots[i])
        seq = [slots[i] for i in order]
        pos = torch.tensor([[self.next_pos[s]] for s in seq], dtype=torch.int32)
        width = int(pos.max())
        mask = (torch.arange(width)[None, :] <= pos - 1).to(torch.int32)
        params = self._sampling_params(len(seq), [sampling[i] for i in order] if sampling else None)
        out = self.model(input_ids=torch.tensor([[tokens[i]] for i in order], dtype=torch.int32),
                         attention_mask=mask, position_ids=pos,
                         seq_ids=torch.tensor(seq, dtype=torch.int32), sampling_params=params)
        for s in seq:
            self.next_pos[s] += 1
        return self._result(out, order, want_logits)

    def release(self, slot: int) -> None:
        # Nothing to free on the device: the slot's KV line is overwritten by its next context
        # encoding, and token generation masks every position past a row's own length.
        self.next_pos.pop(slot, None)
