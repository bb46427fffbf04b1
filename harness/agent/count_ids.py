"""The seed's ``count_ids`` tool: a table of 11 records, filters parsed by a tiny grammar.

The table is chosen so that the wrong filter ``id > 10`` returns the same count (8) as the right
one ``id >= 10``: no record has id 10. A model that picks the wrong operator still gets a precise
number and a clean source back, which is why the trial scores the filter, not only the number.

Filters are strings ``<field> <op> <integer>`` with op one of >=, >, <=, <, ==, !=. They are parsed
with a regular expression and applied with ``operator`` functions; nothing is ever evaluated.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

from kit.errors import KitError

# 11 records, 8 of them with id >= 10 and none with id == 10 (see module docstring).
RECORDS: tuple[dict[str, Any], ...] = tuple(
    {"id": i, "name": n}
    for i, n in [
        (3, "alder"), (7, "birch"), (9, "cedar"), (11, "dogwood"), (12, "elm"), (15, "fir"),
        (18, "ginkgo"), (21, "hazel"), (24, "juniper"), (27, "larch"), (30, "maple"),
    ]
)
SOURCE = "inventory.records (11 rows, fields: id, name)"
FIELDS = ("id",)

QUESTION = ("Of the 11 records in the inventory table, how many have an id >= 10? "
            "Use the count_ids tool, then answer with the number.")
EXPECTED_COUNT = 8
EXPECTED_FILTER = ("id", ">=", 10)
# The plain-text variant (backends without tool calling; also the bench's "agent" profile, which
# imports it from here so that the load benchmark does not load the agent framework).
PLAIN_SYSTEM_PROMPT = "You answer questions about a small table. Finish with a line 'Answer: <number>'."


def plain_question() -> str:
    rows = ", ".join(str(r["id"]) for r in RECORDS)
    return (f"The inventory table has 11 records with these ids: {rows}. "
            "How many of the 11 ids are >= 10? Answer with the number.")


OPS: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt,
    "==": operator.eq, "!=": operator.ne,
}
_FILTER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|==|!=|>|<)\s*(-?\d{1,18})\s*$")


class FilterError(KitError, ValueError):
    """A filter string outside the grammar; the message says what is valid."""


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: int

    def __str__(self) -> str:
        return f"{self.field} {self.op} {self.value}"

    def key(self) -> tuple[str, str, int]:
        return (self.field, self.op, self.value)

    def matches(self, record: dict[str, Any]) -> bool:
        return OPS[self.op](record[self.field], self.value)


def parse_filter(text: Any) -> Filter:
    if not isinstance(text, str):
        raise FilterError(f"filter must be a string like 'id >= 10', got {text!r}")
    m = _FILTER.match(text)
    if not m:
        raise FilterError(f"bad filter {text!r}: expected '<field> <op> <integer>' "
                          f"with op one of {', '.join(OPS)} (e.g. 'id >= 10')")
    field, op, value = m.group(1), m.group(2), int(m.group(3))
    if field not in FIELDS:
        raise FilterError(f"unknown field {field!r} in filter {text!r}; valid: {', '.join(FIELDS)}")
    return Filter(field, op, value)


def count(filters: list[str]) -> dict[str, Any]:
    """Records matching every filter (AND), with the parsed filters and where the data came from."""
    if not isinstance(filters, list):
        raise FilterError(f"filters must be a list of strings, got {type(filters).__name__}")
    parsed = [parse_filter(f) for f in filters]
    n = sum(1 for r in RECORDS if all(f.matches(r) for f in parsed))
    return {"count": n, "filters": [str(f) for f in parsed], "source": SOURCE}


def is_expected_filters(filters: list[str] | None) -> bool:
    """True when a call's filters are exactly the one expected filter (spacing ignored)."""
    if not filters:
        return False
    try:
        keys = {parse_filter(f).key() for f in filters}
    except FilterError:
        return False
    return keys == {EXPECTED_FILTER}


_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
# A number is a whole run of digits: the lookaheads include \d so that backtracking cannot take
# "8" out of "88.5", and a decimal ("Answer: 8.5") is no whole-number answer at all.
# (at most 18 digits: Python refuses int() of a digit run over 4,300, and no count is that long)
_ANSWER_LINE = re.compile(r"answer\s*[:=]\s*\**\s*(-?\d{1,18})(?![.,]?\d)", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])(-?\d{1,18})(?![\w.]\d|\d)|\b(" + "|".join(_WORDS) + r")\b", re.IGNORECASE)
# Numbers the question itself contains; an answer echoing them is not quoting a count.
_ECHO = {10, 11}
_IDS = {r["id"] for r in RECORDS}


def quoted_number(answer: str) -> int | None:
    """The count a final answer quotes, or None when it quotes none or is ambiguous.

    An explicit ``Answer: N`` wins (the last one). Otherwise the numbers in the text, minus those
    that only echo the question (10, 11), must reduce to exactly one distinct value. An answer
    that lists the matching ids ("8: ids 11, 12, 15, …", three ids or more) has them set aside
    too; a hedge between two values ("7 or 8") stays ambiguous.
    """
    explicit = _ANSWER_LINE.findall(answer or "")
    if explicit:
        return int(explicit[-1])
    values = {int(d) if d else _WORDS[w.lower()] for d, w in _NUMBER.findall(answer or "")} - _ECHO
    if len(values & _IDS) >= 3:
        values -= _IDS
    return values.pop() if len(values) == 1 else None
