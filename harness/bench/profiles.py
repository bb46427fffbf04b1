"""Request profiles: what each benchmark request asks, with prompts of a chosen token length.

Prompts are built from a fixed list of common short English words, each of which is one token
in the tokenizers these backends use (Gemma's SentencePiece, GPT-style BPEs), so a prompt of N
words is ~N tokens without a tokenizer dependency. Every request gets a different random word
sequence (seeded), so a server's prefix cache cannot make later requests cheaper. The server's
own ``prompt_tokens`` is recorded per request when it reports usage.

Output length is fixed by ``max_tokens`` plus, on vLLM-style servers, ``ignore_eos`` and
``min_tokens`` (see ``BenchRequest.fixed_output``); Bedrock has no such switch, so its outputs
end where the model stops (the record's ``finish_reason`` says so).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from kit.errors import KitError

# ~1 token each (with a leading space) in SentencePiece and BPE vocabularies.
WORDS = tuple(dict.fromkeys("""
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye job word
business issue side kind head house service friend father power hour game line end member law car
city community name president team minute idea kid body information back parent face others level
office door health person art war history party result change morning reason research girl guy
moment air teacher force education foot boy age policy music market sense nation plan college
interest death experience effect class control care field development role effort rate heart drug
show leader light voice wife police mind price report decision son view relationship town road arm
difference value building action model season society tax director position player record paper
space ground form event official matter center couple site project activity star table need court
oil situation cost industry figure street image phone data picture practice piece land product
doctor wall patient worker news test movie north love support technology step baby computer type
attention film tree source organization hair window evidence population site red blue green small
large good new old great high long little own other right big different early young important few
public bad same able last late hard major better best real sure clear free full open simple strong
""".split()))

_CUSTOM = re.compile(r"^(\d+)-(\d+)$")


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    max_tokens: int
    system: str | None = None
    fixed_output: bool = True  # ask the server to produce exactly max_tokens (ignore_eos, min_tokens)
    prompt_words: int = 0


@dataclass(frozen=True)
class Profile:
    name: str
    input_tokens: int | None  # None: fixed prompt (agent)
    output_tokens: int

    def request(self, index: int, seed: int = 0) -> BenchRequest:
        if self.input_tokens is None:
            from harness.agent.count_ids import PLAIN_SYSTEM_PROMPT, plain_question
            return BenchRequest(prompt=plain_question(), max_tokens=self.output_tokens,
                                system=PLAIN_SYSTEM_PROMPT, fixed_output=False)
        return BenchRequest(prompt=synthetic_prompt(self.input_tokens, seed * 1_000_003 + index),
                            max_tokens=self.output_tokens, prompt_words=self.input_tokens)

    def to_dict(self) -> dict:
        return {"name": self.name, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens}


_PREFIX = "Repeat these words:"  # ~5 tokens; the chat template adds its own


def synthetic_prompt(tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    n = max(1, tokens - 8)  # leave room for the instruction and the chat template's tokens
    return _PREFIX + " " + " ".join(rng.choices(WORDS, k=n))


NAMED = {
    # the agent trial's question, as the plain-text variant (no tools): short prompt, short answer
    "agent": Profile("agent", None, 128),
    # seeds 001/002: long prompt, long answer
    "2k-512": Profile("2k-512", 2048, 512),
    # seed 004: 180 tokens in, 256 out, driven with Poisson arrivals (use --rate)
    "poisson-180-256": Profile("poisson-180-256", 180, 256),
}


class ProfileError(KitError, ValueError):
    pass


def get_profile(spec: str) -> Profile:
    """A named profile or ``IN-OUT`` token lengths, e.g. ``512-128``."""
    if spec in NAMED:
        return NAMED[spec]
    m = _CUSTOM.match(spec.strip())
    if m:
        i, o = int(m.group(1)), int(m.group(2))
        if 1 <= i <= 1_000_000 and 1 <= o <= 1_000_000:
            return Profile(f"{i}-{o}", i, o)
    raise ProfileError(f"--profile {spec!r}: use one of {', '.join(NAMED)} or IN-OUT token "
                       f"lengths such as 512-128")
