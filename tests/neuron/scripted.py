"""A scripted ``Generator`` for server tests: it writes what Gemma 4 writes, token by token.

First turn: a tool call in Gemma 4's own syntax, ended by ``<|tool_response>`` (the model hands
the turn to the caller). Once the prompt carries a tool response: an answer quoting the value
the tool returned, ended by ``<turn|>``. Tokens come from the tiny model's BPE tokenizer, so
the call text reaches the parser cut at real token boundaries.
"""
from __future__ import annotations

import asyncio
import re

from ami.neuron.chat import ChatFormat
from ami.neuron.generator import Limits, SamplingParams
from ami.neuron.toolcalls import CALL_END, STR, format_call

RESPONSE = re.compile(r"<\|tool_response>response:(\w+)\{value:" + re.escape(STR) + r"(.*?)"
                      + re.escape(STR) + r"\}<tool_response\|>", re.S)


class ScriptedGenerator:
    model_id = "scripted-gemma4"

    def __init__(self, tokenizer, call_name: str, call_args: dict, preamble: str = "",
                 end: str = CALL_END + "<|tool_response>") -> None:
        self.chat = ChatFormat.for_tokenizer(tokenizer)
        self.limits = Limits(max_prompt_tokens=8192, max_total_tokens=16384, max_batch_size=4)
        self.tok = tokenizer
        self.call_name, self.call_args, self.preamble, self.end = call_name, call_args, preamble, end
        self.prompts: list[str] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def stats(self) -> dict:
        return {"prompts": len(self.prompts)}

    def script(self, prompt: str) -> str:
        results = RESPONSE.findall(prompt)
        if results:
            name, value = results[-1]
            return f"The {name} tool says {value}, so the answer is {value}.<turn|>"
        return self.preamble + format_call(self.call_name, self.call_args)[:-len(CALL_END)] + self.end

    async def generate(self, prompt_ids: list[int], params: SamplingParams):
        prompt = self.tok.decode(prompt_ids, skip_special_tokens=False)
        self.prompts.append(prompt)
        ids = self.tok.encode(self.script(prompt), add_special_tokens=False)
        for token in ids[:params.max_tokens]:
            await asyncio.sleep(0)
            yield token

    def generate_many(self, prompts: list[list[int]], params: list[SamplingParams]) -> list:
        return [self.generate(p, q) for p, q in zip(prompts, params)]
