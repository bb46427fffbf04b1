"""Stop strings as vLLM matches them: across token boundaries, first stop string in the
request's order among those the newest text completes, cut before it (or after it with
include_stop_str_in_output), and nothing that could still become a stop string streamed early."""
from __future__ import annotations

import random

import pytest

from ami.neuron.stops import StopMatcher


def reference(pieces: list[str], stops: list[str], include: bool) -> tuple[str, str | None]:
    """vLLM's check_stop_strings run after every piece over the whole text (no hold-back logic)."""
    text = ""
    for piece in pieces:
        text += piece
        if not piece:
            continue
        for s in stops:
            at = text.find(s, max(0, len(text) - len(piece) - len(s) + 1))
            if at != -1:
                return (text[: at + len(s)] if include else text[:at]), s
    return text, None


def run(pieces: list[str], stops: list[str], include: bool) -> tuple[str, str | None, list[str]]:
    m = StopMatcher(tuple(stops), include)
    sent = []
    for piece in pieces:
        sent.append(m.feed(piece))
        if m.stopped:
            break
    sent.append(m.flush())
    return "".join(sent), m.stopped, sent


def test_random_pieces_match_the_reference_and_never_stream_a_stop_prefix():
    rng = random.Random(0)
    for _ in range(20000):
        alpha = "ab c\n"
        text = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 30)))
        stops = ["".join(rng.choice(alpha) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        include = rng.random() < 0.5
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 8)))) + [len(text)]
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts)]
        out, stopped, sent = run(pieces, stops, include)
        assert (out, stopped) == reference(pieces, stops, include), (pieces, stops, include)
        if not include and stopped:
            # what was streamed before the piece that matched holds no stop string
            assert all(s not in "".join(sent[:-2]) for s in stops)


@pytest.mark.parametrize("pieces, stops, include, want", [
    (["Hel", "lo\n\nQ", "uestion: x"], ["\n\nQuestion:"], False, "Hello"),
    (["Hel", "lo\n\nQ", "uestion: x"], ["\n\nQuestion:"], True, "Hello\n\nQuestion:"),
    (["a", "b", "c"], ["x"], False, "abc"),
    (["one. two."], [".", "two"], False, "one"),
])
def test_examples(pieces, stops, include, want):
    assert run(pieces, stops, include)[0] == want
