"""Chat messages to prompt token ids, and generated ids back to text, for any HF tokenizer.

The prompt is rendered by the tokenizer's own chat template (a real Gemma 4 checkpoint ships
one; the tiny model carries ``gemma4_chat_template.jinja``), with the request's ``tools`` passed
to it, so tool declarations are written the way the model was trained to read them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

# Tokens that end a Gemma 4 answer: end of turn, end of text, and the opening of a tool result
# (after a call the model hands the turn to the caller by starting a tool response).
STOP_TOKENS = ("<turn|>", "<eos>", "<|tool_response>")


@dataclass
class ChatFormat:
    tokenizer: object
    stop_ids: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def for_tokenizer(cls, tokenizer, extra_stop_ids=()) -> "ChatFormat":
        if not getattr(tokenizer, "chat_template", None):
            from .tiny import chat_template
            tokenizer.chat_template = chat_template()
        vocab = tokenizer.get_vocab()
        ids = {vocab[t] for t in STOP_TOKENS if t in vocab}
        if tokenizer.eos_token_id is not None:
            ids.add(tokenizer.eos_token_id)
        ids.update(i for i in extra_stop_ids if i is not None)
        return cls(tokenizer, frozenset(ids))

    @functools.cached_property
    def max_token_chars(self) -> int:
        """Characters in the longest vocabulary entry: no token covers more text than that.

        Byte-level BPE spells every byte as one character (a UTF-8 character is 1-4 bytes) and
        SentencePiece-style vocabularies spell the text itself, so a text of C characters needs at
        least C / max_token_chars tokens, as long as the normaliser does not drop characters."""
        return max((len(t) for t in self.tokenizer.get_vocab()), default=1) or 1

    def render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tools=tools or None,
                                                  add_generation_prompt=True, tokenize=False)
        # The template writes <bos> itself; adding special tokens again would double it.
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decoder(self, skip_special: bool = False) -> "IncrementalDecoder":
        return IncrementalDecoder(self.tokenizer, skip_special)


class IncrementalDecoder:
    """Token ids in, new text out, never splitting a multi-byte character across chunks.

    Decodes a short window of recent ids and emits only what is new once it no longer ends in
    a replacement character (the tail of an unfinished UTF-8 sequence). Special tokens are kept
    (the tool-call markers are special tokens and the parser needs them) unless ``skip_special``
    (completions text, as vLLM's default ``skip_special_tokens=True``).
    """

    def __init__(self, tokenizer, skip_special: bool = False) -> None:
        self._tok = tokenizer
        self._skip = skip_special
        self._ids: list[int] = []
        self._prefix = 0  # start of the window decoded for context
        self._read = 0  # ids before this are already emitted

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return now[len(before):]
        return ""

    def flush(self) -> str:
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return now[len(before):]
