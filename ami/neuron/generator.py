"""The one interface the server talks to, whatever runs the model.

A ``Generator`` owns the chat format (tokenizer and template), the compiled limits, and
``generate(prompt_ids, params)``: an async iterator of token ids (``scheduler.Sampled`` items,
after one ``scheduler.PromptLogprobs``, when the request asks for log-probabilities), with
concurrent calls batched behind it. ``BatchedGenerator`` is the implementation both generators
use: the continuous-batching scheduler over a device-specific ``SlotRunner`` (CPU: transformers;
Neuron: the compiled NxD Inference model). Tests add a scripted implementation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol

from .chat import ChatFormat
from .scheduler import BatchScheduler, QueueFull, Row, SlotRunner

__all__ = ["BatchedGenerator", "Generator", "LimitError", "Limits", "QueueFull", "SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False
    logprobs: int | None = None  # alternatives per generated token; None: no log-probabilities
    prompt_logprobs: int | None = None  # the same for the prompt tokens (completions' echo)
    top_k: int = 0  # 0: off
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple = ()  # (token id, bias) pairs
    allowed: object = None  # structured output: output ids so far -> token ids allowed next


class LimitError(ValueError):
    """A request the compiled shapes cannot serve. The message names the limit."""

    def __init__(self, message: str, param: str, code: str) -> None:
        super().__init__(message)
        self.param, self.code = param, code


@dataclass(frozen=True)
class Limits:
    """The shapes the model was compiled for (the CPU generator enforces the same ones)."""

    max_prompt_tokens: int  # largest prompt (context-encoding) bucket
    max_total_tokens: int  # prompt + generated tokens per sequence (compiled sequence length)
    max_batch_size: int  # sequences decoded together

    def resolve_max_tokens(self, prompt_tokens: int, max_tokens: int | None) -> int:
        """Check a request against the shapes; return the number of tokens it may generate."""
        if prompt_tokens > self.max_prompt_tokens:
            raise LimitError(
                f"prompt is {prompt_tokens} tokens; this server is compiled for prompts of at most "
                f"{self.max_prompt_tokens} tokens (largest prompt bucket)",
                "messages", "prompt_too_long")
        room = self.max_total_tokens - prompt_tokens
        if max_tokens is None:
            return room
        if prompt_tokens + max_tokens > self.max_total_tokens:
            raise LimitError(
                f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) = "
                f"{prompt_tokens + max_tokens} exceeds the compiled total length of "
                f"{self.max_total_tokens} tokens; ask for at most {room} new tokens",
                "max_tokens", "total_length_exceeded")
        return max_tokens


class Generator(Protocol):
    model_id: str
    chat: ChatFormat
    limits: Limits

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]: ...

    def generate_many(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[AsyncIterator]: ...

    def stats(self) -> dict: ...


class BatchedGenerator:
    """Generator over a SlotRunner: every request goes through the continuous-batching scheduler."""

    def __init__(self, model_id: str, chat: ChatFormat, limits: Limits, runner: SlotRunner,
                 batch_wait_s: float = 0.005, max_queue: int = 64) -> None:
        if runner.slots != limits.max_batch_size:
            raise ValueError(f"runner has {runner.slots} slots, limits say {limits.max_batch_size}")
        self.model_id, self.chat, self.limits = model_id, chat, limits
        self.scheduler = BatchScheduler(runner, limits.max_total_tokens, batch_wait_s, max_queue)

    async def start(self) -> None:
        await self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.stop()

    def _row(self, prompt_ids: list[int], params: SamplingParams) -> Row:
        return Row(list(prompt_ids), params.max_tokens, params.temperature, params.top_p,
                   frozenset() if params.ignore_eos else self.chat.stop_ids,
                   logprobs=params.logprobs, prompt_logprobs=params.prompt_logprobs, top_k=params.top_k,
                   seed=params.seed, presence_penalty=params.presence_penalty,
                   frequency_penalty=params.frequency_penalty, repetition_penalty=params.repetition_penalty,
                   logit_bias=params.logit_bias, allowed=params.allowed)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]:
        """Raises QueueFull when no place is left to wait."""
        return self.scheduler.submit(self._row(prompt_ids, params))

    def generate_many(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[AsyncIterator]:
        """Several sequences of one request, queued together or refused together (QueueFull)."""
        return self.scheduler.submit_many([self._row(p, q) for p, q in zip(prompts, params)])

    def retry_after(self) -> int:
        return self.scheduler.retry_after()

    def stats(self) -> dict:
        return self.scheduler.stats()
