"""A user's own item set: ``{"id", "question", "answer"}`` per JSONL line, scored by exact match
on the final number or letter of the reply.

The prompt asks for a last line ``Answer: X``. Extraction takes that line when present, else the
last number (for a numeric gold answer) or the last standalone capital letter A-J (for a letter;
outside an Answer line a bare "I" is read as the pronoun).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError

ITEMS_TASK = "items"  # the task name records of an --items file carry
INSTRUCTION = ("Solve the problem. End your reply with one last line of the form "
               "'Answer: X', where X is only the final number or the letter of the chosen option.")

_NUMBER = re.compile(r"[-+]?\$?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")
_LETTER = re.compile(r"\b([A-J])\b")  # option letters (up to ten options)
_LETTER_ANYWHERE = re.compile(r"\b([A-HJ])\b")  # outside an Answer line a bare "I" is the pronoun
_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*\**\s*(.+)", re.IGNORECASE)


MAX_BYTES = 256 * 1024 * 1024  # an items file is read whole: a million items of 250 bytes fit


class ItemsError(KitError, ValueError):
    """A missing or malformed items file: one line, exit 2."""


@dataclass(frozen=True)
class Item:
    task: str
    id: str
    question: str
    answer: str

    @property
    def kind(self) -> str:
        return "letter" if re.fullmatch(r"[A-Za-z]", self.answer.strip()) else "number"


def load_items(path: Path, task: str = ITEMS_TASK, option: str = "--items") -> list[Item]:
    """The items of a JSONL file, read by kit/jsonfile.py: a regular file of at most MAX_BYTES,
    each line UTF-8 JSON nested at most 64 deep (an id of 5,000 digits, a line nested 100,000
    deep: one ItemsError naming the line, not a traceback)."""
    from kit.jsonfile import JsonFileError, parse, read_bytes

    items: list[Item] = []
    seen: set[str] = set()
    try:
        lines = read_bytes(path, label=option, cap=MAX_BYTES).split(b"\n")
    except JsonFileError as e:
        raise ItemsError(str(e).replace("not a JSON file", "not an items file")) from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{option} {path}:{no}"
        try:
            rec = parse(line, where)
        except JsonFileError as e:
            raise ItemsError(f"{e}; each line must be "
                             '{"id": ..., "question": "...", "answer": "..."}') from None
        if not isinstance(rec, dict) or not {"id", "question", "answer"} <= rec.keys():
            raise ItemsError(f'{where}: needs the keys "id", "question" and "answer"')
        iid, q, a = rec["id"], rec["question"], rec["answer"]
        if not isinstance(iid, (str, int)) or isinstance(iid, bool) or not str(iid).strip():
            raise ItemsError(f"{where}: id {iid!r} must be a non-empty string or an integer")
        if not isinstance(q, str) or not q.strip():
            raise ItemsError(f"{where}: question must be a non-empty string")
        if isinstance(a, bool) or not isinstance(a, (str, int, float)) or normalize(str(a)) is None:
            raise ItemsError(f"{where}: answer {a!r} must be a number or a single letter")
        if str(iid) in seen:
            raise ItemsError(f"{where}: id {iid!r} appears twice")
        seen.add(str(iid))
        items.append(Item(task, str(iid), q, str(a).strip()))
    if not items:
        raise ItemsError(f"{option} {path}: no items")
    return items


def messages(item: Item) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{item.question.strip()}\n\n{INSTRUCTION}"}]


def prompt_hash(msgs: list[dict[str, str]]) -> str:
    """sha256 of the exact messages sent (first 16 hex digits): the same item on every backend
    has the same hash, and an item whose text changed is not resumed from an old answer."""
    raw = json.dumps(msgs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def normalize(text: str) -> str | None:
    """'1,234.50' -> '1234.5', '$7' -> '7', 'b' -> 'B'; None when it is neither."""
    t = text.strip().strip("*.").strip()
    if re.fullmatch(r"[A-Za-z]", t):
        return t.upper()
    m = re.fullmatch(r"([-+]?)\$?(\d[\d,]*(?:\.\d+)?|\.\d+)", t)
    if not m:
        return None
    num = m.group(2).replace(",", "")
    if "." in num:
        num = num.rstrip("0").rstrip(".") or "0"
    num = num.lstrip("0") or "0"
    if num.startswith("."):
        num = "0" + num
    return ("-" if m.group(1) == "-" and num != "0" else "") + num


def _last(pattern: re.Pattern[str], text: str, kind: str) -> str | None:
    found = pattern.findall(text)
    for cand in reversed(found):
        norm = normalize(cand)
        if norm is not None and (kind == "letter") == norm.isalpha():
            return norm
    return None


def extract(response: str, kind: str) -> str | None:
    """The final number or letter of a reply, normalized; None when there is none."""
    pattern = _LETTER if kind == "letter" else _NUMBER
    for line in reversed(response.strip().splitlines()):
        m = _ANSWER_LINE.search(line)
        if m:
            got = _last(pattern, m.group(1), kind)
            if got is not None:
                return got
    return _last(_LETTER_ANYWHERE if kind == "letter" else pattern, response, kind)


def score(item: Item, response: str) -> tuple[str | None, bool]:
    got = extract(response, item.kind)
    return got, got is not None and got == normalize(item.answer)
