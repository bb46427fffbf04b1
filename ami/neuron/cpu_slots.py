"""Slots on a transformers model: each sequence keeps its own KV cache, decoded together.

The CPU generator's ``SlotRunner``. A new sequence is prefilled alone (batch 1, its own cache),
then merged into the running batch; every decode step runs all live sequences in one forward.
Sequences of different lengths share the batch by left padding: each row's cache is aligned to
the right, the attention mask zeroes the padding, and ``position_ids`` carry each row's true
positions (RoPE). The masks transformers builds index keys by their place in the padded cache
(``masking_utils._preprocess_mask_arguments`` takes the query offset from the cache, not from
``position_ids``), and a row's real tokens are contiguous at the right, so causal and
sliding-window distances between them are the true ones. The cache keeps every position of every
layer (``DynamicCache()`` without a config: full layers only), so that padding and trimming stay
plain tensor operations. A finished row is dropped from the batch at once, and padding columns no
row needs any more are cut off.

This is the CPU twin of what NxD Inference's continuous batching does on a NeuronCore (one KV
line per slot, context encoding into one line, token generation over the batch); it exists so
every scheduling path runs for real in tests, and so a request's greedy tokens are the same
whether it ran alone or joined a busy batch.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


class HFSlotRunner:
    prompt_logits = True

    def __init__(self, model, slots: int) -> None:
        self.model, self.slots = model, slots
        self.order: list[int] = []  # slot of each batch row
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros((0, 0), dtype=torch.long)  # (rows, cached positions): 1 = real token
        self.next_pos = torch.zeros((0,), dtype=torch.long)  # position of each row's next token

    @torch.inference_mode()
    def prefill(self, slot: int, prompt_ids: list[int], all_logits: bool = False):
        if slot in self.order:
            raise ValueError(f"slot {slot} is busy")
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids),
                         position_ids=torch.arange(len(prompt_ids))[None], past_key_values=cache,
                         use_cache=True, logits_to_keep=0 if all_logits else 1)
        self._join(slot, cache, len(prompt_ids))
        return out.logits[0].float()

    @torch.inference_mode()
    def decode(self, slots: list[int], tokens: list[int]):
        if sorted(slots) != sorted(self.order):
            raise ValueError(f"decode over slots {slots}, live slots are {self.order}")
        row_of = {s: i for i, s in enumerate(self.order)}
        fed = torch.zeros((len(self.order), 1), dtype=torch.long)
        for s, t in zip(slots, tokens):
            fed[row_of[s], 0] = t
        self.mask = torch.cat([self.mask, torch.ones((len(self.order), 1), dtype=torch.long)], dim=1)
        out = self.model(input_ids=fed, attention_mask=self.mask, position_ids=self.next_pos[:, None],
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.next_pos = self.next_pos + 1
        logits = out.logits[:, -1, :].float()
        return logits[[row_of[s] for s in slots]]

    def release(self, slot: int) -> None:
        if slot not in self.order:
            return
        keep = [i for i, s in enumerate(self.order) if s != slot]
        self.order = [self.order[i] for i in keep]
        if not keep:
            self.cache, self.mask, self.next_pos = None, self.mask[:0, :0], self.next_pos[:0]
            return
        index = torch.tensor(keep)
        self.mask, self.next_pos = self.mask[index], self.next_pos[index]
        # Columns that are padding for every remaining row: no query will ever attend to them.
        unused = int((self.mask.sum(0) > 0).long().argmax())
        self.mask = self.mask[:, unused:]
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False) and layer.keys is not None and layer.keys.numel():
                layer.keys = layer.keys[index, :, unused:]
                layer.values = layer.values[index, :, unused:]

    def _join(self, slot: int, cache: DynamicCache, length: int) -> None:
        """Append a prefilled sequence's cache as a new batch row, left-padding whichever side is
        shorter so that every row ends at the last cached column."""
        width = self.mask.shape[1]
        new_width = max(width, length)
        if self.cache is None:
            self.cache = cache
        else:
            for old, new in zip(self.cache.layers, cache.layers):
                if not getattr(new, "is_initialized", False) or new.keys is None or not new.keys.numel():
                    continue  # a KV-sharing layer keeps no cache of its own
                old.keys = torch.cat([_pad_left(old.keys, new_width), _pad_left(new.keys, new_width)])
                old.values = torch.cat([_pad_left(old.values, new_width), _pad_left(new.values, new_width)])
        row = torch.ones((1, length), dtype=torch.long)
        self.mask = torch.cat([_pad_left(self.mask, new_width, dim=1), _pad_left(row, new_width, dim=1)])
        self.next_pos = torch.cat([self.next_pos, torch.tensor([length])])
        self.order.append(slot)


def _pad_left(t: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)
