"""A paced stand-in for the NeuronCore, for measuring the engine's host path at the real shapes.

``python -m ami.neuron.server --device simulated --step-ms 6 --prefill-ms 40`` serves the OpenAI
API through everything the real engine runs on the host (intake, chat template, scheduler,
sampling, detokenizer, API, SSE) over a runner that takes exactly the given time per decode step
and per prefill, as the compiled model would, and returns what the Neuron runner returns in that
mode: token ids sampled "on the device" (``--sampling device``, with logits for the rows the host
must sample), or logits of shape rows x 262,144 (``--sampling host``). The tokenizer has Gemma 4's
vocabulary size (262,144: kit/models.py E2B) with its control tokens and synthetic words; there
are no weights. A calibration tool like the bench's reference server: ``/health`` says it is
simulated, and no figure it produces is a model's.
"""
from __future__ import annotations

import time

import torch

from .scheduler import DeviceOut

VOCAB = 262_144  # Gemma 4's vocabulary (google/gemma-4-E2B-it config.json text_config.vocab_size)


def build_tokenizer(vocab: int = VOCAB):
    """A fast tokenizer of ``vocab`` entries: Gemma 4's control tokens, then words "w<n>". Word-level
    (one id per word, whitespace-separated), so any generated id decodes to text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from .tiny import SPECIAL_TOKENS, chat_template

    words = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for i in range(len(words), vocab):
        words[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=SPECIAL_TOKENS[4:])
    fast.chat_template = chat_template()
    return fast


class PacedRunner:
    """A SlotRunner whose prefill and decode take ``prefill_s`` and ``step_s`` of wall time each,
    measured from the call, whatever the host did meanwhile (the device works while the host
    waits). Generated text is a fixed cycle of ordinary words, never a stop token."""

    prompt_logits = False

    def __init__(self, slots: int, step_s: float, prefill_s: float, device_sampling: bool,
                 vocab: int = VOCAB, first_word: int = 16) -> None:
        self.slots, self.step_s, self.prefill_s = slots, step_s, prefill_s
        self.device_sampling = device_sampling
        self.vocab, self.first_word = vocab, first_word
        self.pos: dict[int, int] = {}
        # Logits as the device hands them over: one preallocated buffer per batch size, so making
        # them costs nothing the real runner would not pay (a copy from the device).
        gen = torch.Generator().manual_seed(0)
        self._logits = torch.randn(slots, vocab, generator=gen)
        self._logits[:, :first_word] = -30.0  # never a control token (stop tokens among them)
        self.steps = self.prefills = 0

    def _token(self, slot: int) -> int:
        return self.first_word + (self.pos[slot] * 7 + slot) % 1000

    def _out(self, slots: list[int], sampling, want_logits):
        if not self.device_sampling:
            return self._logits[: len(slots)]
        tokens = torch.tensor([self._token(s) for s in slots], dtype=torch.long)
        logits = self._logits[: len(slots)] if want_logits and any(want_logits) else None
        return DeviceOut(tokens, logits)

    @staticmethod
    def _wait_until(deadline: float) -> None:
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def prefill(self, slot: int, prompt_ids: list[int], all_logits: bool = False, sampling=None, want_logits=None):
        t0 = time.perf_counter()
        self.pos[slot] = len(prompt_ids)
        out = self._out([slot], sampling, want_logits)
        self.prefills += 1
        self._wait_until(t0 + self.prefill_s)
        return out

    def decode(self, slots: list[int], tokens: list[int], sampling=None, want_logits=None):
        t0 = time.perf_counter()
        for s in slots:
            self.pos[s] += 1
        out = self._out(slots, sampling, want_logits)
        self.steps += 1
        self._wait_until(t0 + self.step_s)
        return out

    def release(self, slot: int) -> None:
        self.pos.pop(slot, None)


def make_generator(model_id: str, limits, batch_wait_s: float, step_ms: float, prefill_ms: float,
                   sampling: str, max_queue: int = 64):
    from .chat import ChatFormat
    from .generator import BatchedGenerator

    tokenizer = build_tokenizer()
    chat = ChatFormat.for_tokenizer(tokenizer)
    runner = PacedRunner(limits.max_batch_size, step_ms / 1000.0, prefill_ms / 1000.0, sampling == "device")
    return BatchedGenerator(model_id, chat, limits, runner, batch_wait_s, max_queue)
