"""The one interface the server talks to, whatever runs the model.

A ``Generator`` owns the chat format (tokenizer and template), the compiled limits, and
``generate(prompt_ids, params)``: an async iterator of token ids, with concurrent calls batched
behind it. ``BatchedGenerator`` is the implementation both generators use: a scheduler that
batches requests up to the compiled batch size, over a device-specific ``Runner`` (CPU:
transformers; Neuron: the compiled NxD Inference model). Tests add a scripted implementation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol

from .chat import ChatFormat
from .scheduler import BatchScheduler, Row, Runner


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False


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

    def stats(self) -> dict: ...


class BatchedGenerator:
    """Generator over a Runner: every request goes through the batching scheduler."""

    def __init__(self, model_id: str, chat: ChatFormat, limits: Limits, runner: Runner,
                 batch_wait_s: float = 0.005) -> None:
        self.model_id, self.chat, self.limits = model_id, chat, limits
        self.scheduler = BatchScheduler(runner, limits.max_batch_size, limits.max_total_tokens,
                                        batch_wait_s)

    async def start(self) -> None:
        await self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.stop()

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]:
        row = Row(list(prompt_ids), params.max_tokens, params.temperature, params.top_p,
                  frozenset() if params.ignore_eos else self.chat.stop_ids)
        return self.scheduler.submit(row)

    def stats(self) -> dict:
        return self.scheduler.stats()
