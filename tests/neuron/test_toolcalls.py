"""Gemma 4 tool-call parsing, whole and streamed, on the model family's real call syntax:
``<|tool_call>call:NAME{key:<|"|>string<|"|>,n:42}<tool_call|>`` (vLLM's gemma4 parser and the
Gemma 4 chat template use the same framing tokens and the same <|"|> string fence)."""
from __future__ import annotations

import json

import pytest

from ami.neuron.toolcalls import (CALL_END, CALL_START, STR, ContentDelta, ToolCall, ToolCallStream,
                                  format_call, parse_all, parse_call)

Q = STR  # the <|"|> string fence token

AGENT_CALL = f'{CALL_START}call:count_ids{{ids:[3,12,15,8,21,10,30,11,2,44,19],filter:{Q}id >= 10{Q}}}{CALL_END}'
# Awkward on purpose: marker look-alikes and structure characters inside strings, nesting,
# every scalar kind, two calls back to back, text around them.
TRICKY = (
    "Let me check < that |> first. "
    f"{CALL_START}call:lookup{{query:{Q}a}}b,c:d<tool_call|>e{Q},"
    f"opts:{{deep:{{k:[1,2.5,-3,true,false,null]}},empty:{{}},list:[]}},"
    f"{Q}quoted key{Q}:{Q}{Q}}}{CALL_END}"
    f"{CALL_START}call:second.tool-x{{}}{CALL_END} done <|tool"
)


def collect(events):
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    calls = [(e.index, e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCall)]
    return content, calls


def run_chunks(chunks):
    s = ToolCallStream()
    events = []
    for c in chunks:
        events += s.feed(c)
    return collect(events + s.finish())


def test_agent_style_call():
    content, calls = parse_all("I'll count them. " + AGENT_CALL)
    assert content == "I'll count them. "
    assert calls[0].name == "count_ids" and calls[0].index == 0 and calls[0].id.startswith("call_")
    assert json.loads(calls[0].arguments) == {"ids": [3, 12, 15, 8, 21, 10, 30, 11, 2, 44, 19],
                                              "filter": "id >= 10"}


def test_tricky_text_whole():
    content, calls = run_chunks([TRICKY])
    assert content == "Let me check < that |> first.  done <|tool"
    assert calls == [
        (0, "lookup", {"query": "a}b,c:d<tool_call|>e",
                       "opts": {"deep": {"k": [1, 2.5, -3, True, False, None]}, "empty": {}, "list": []},
                       "quoted key": ""}),
        (1, "second.tool-x", {}),
    ]


@pytest.mark.parametrize("text", [TRICKY, "ok " + AGENT_CALL + " and more"])
def test_every_split_gives_the_same_result(text):
    """Property: however the text is cut (inside a marker, inside a string fence, between a
    key and its colon...), streaming the pieces equals parsing the whole. Every single cut,
    and every pair of cuts (every third second cut on the longer text, to stay fast)."""
    expected = run_chunks([text])
    n = len(text)
    for i in range(n + 1):
        assert run_chunks([text[:i], text[i:]]) == expected, i
        for j in range(i + 1, n, 3 if n > 120 else 1):
            assert run_chunks([text[:i], text[i:j], text[j:]]) == expected, (i, j)


def test_one_character_at_a_time():
    assert run_chunks(list(TRICKY)) == run_chunks([TRICKY])


def test_content_never_leaks_a_partial_marker_while_streaming():
    s = ToolCallStream()
    seen = ""
    for ch in "hello " + AGENT_CALL:
        for e in s.feed(ch):
            if isinstance(e, ContentDelta):
                seen += e.text
    assert seen == "hello "  # no '<', '<|tool', ... ever emitted as content


def test_plain_text_passes_through_and_no_call_is_invented():
    assert run_chunks(["a < b and c|> d <|", "tool_response> e"]) == ("a < b and c|> d <|tool_response> e", [])


def test_malformed_call_stays_content():
    bad = f"{CALL_START}call:f{{x:}}{CALL_END}"
    assert run_chunks([bad]) == (bad, [])
    bad2 = f"{CALL_START}not a call{CALL_END}after"
    assert run_chunks([bad2]) == (bad2, [])


def test_call_cut_by_max_tokens_is_returned_as_text():
    cut = AGENT_CALL[:40]
    assert run_chunks(["x", cut]) == ("x" + cut, [])


@pytest.mark.parametrize("args", [
    {}, {"a": "plain"}, {"n": 42, "f": -0.25, "t": True, "no": False, "z": None},
    {"nested": {"list": [1, "two", {"three": [3]}]}}, {"s": "commas, colons: and {braces}"},
])
def test_format_then_parse_round_trips(args):
    text = format_call("fn", args)
    assert text.startswith(CALL_START) and text.endswith(CALL_END)
    assert parse_call(text[len(CALL_START):-len(CALL_END)]) == ("fn", args)


def test_call_closed_by_the_end_of_turn_still_counts():
    """Gemma 4 sometimes ends a call with its end-of-turn token instead of <tool_call|>; the
    server drops the stop token and the complete call is kept."""
    content, calls = run_chunks(["ok ", AGENT_CALL[:-len(CALL_END)]])
    assert content == "ok " and [c[1] for c in calls] == ["count_ids"]
    assert calls[0][2]["filter"] == "id >= 10"


def test_stray_colon_after_the_start_marker():
    _, calls = run_chunks([f"{CALL_START}:call:bash{{command:{Q}ls -la{Q}}}{CALL_END}"])
    assert calls == [(0, "bash", {"command": "ls -la"})]


def test_json_quoted_strings_are_strings_not_bare_words():
    # Seen in Gemma 4 output: "..." instead of the <|"|> fence, commas and escapes included.
    _, calls = run_chunks([f'{CALL_START}call:grep{{"pattern":"a, b \\"c\\"",path:{Q}x.py{Q}}}{CALL_END}'])
    assert calls == [(0, "grep", {"pattern": 'a, b "c"', "path": "x.py"})]
