"""The context-key table of docs/stacks.md, rendered from the keys table (kit/config.py KEYS), so a
key, its default and its meaning are written once, in its row, and every key the kit accepts is
documented.

    python -m kit.config_doc            # print the table
    python -m kit.config_doc --write    # rewrite it in docs/stacks.md
    python -m kit.config_doc --check    # exit 1, one line, when docs/stacks.md disagrees

The table sits between two HTML comments (invisible on GitHub)::

    <!-- generated: context-keys (python -m kit.config_doc --write) -->
    ...
    <!-- end generated: context-keys -->

A family row (``<id>_az``) names the catalog ids that have the key, so adding a catalog row, or a
key, changes the table: run ``--write`` then; tests/kit/test_config_doc.py fails until the file
agrees. Plain Python (no aws-cdk-lib).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from kit.catalog import BACKENDS
from kit.config import ID, KEYS, Key
from kit.cli import generated_docs_command
from kit.errors import KitError

ROOT = Path(__file__).resolve().parent.parent
PATH = "docs/stacks.md"
NAME = "context-keys"
COMMAND = "python -m kit.config_doc --write"
BEGIN = f"<!-- generated: {NAME} ({COMMAND}) -->"
END = f"<!-- end generated: {NAME} -->"
EVERY_ID = "every id"


class DocError(KitError, ValueError):
    """The file lacks its markers; str(e) is the one line to show."""


def key_cell(row: Key) -> str:
    """The key, or a family's pattern with the ids that have it (``every id``); a family of one row
    is shown as that row's key (``g6_image``)."""
    if row.has is None:
        return f"`{row.name}`"
    rows = row.rows()
    if len(rows) == 1:
        return f"`{row.key(rows[0].id)}`"
    ids = EVERY_ID if len(rows) == len(BACKENDS) else ", ".join(b.id for b in rows)
    return f"`{row.name}` ({ids})"


def default_cell(row: Key) -> str:
    if callable(row.shown):
        return row.shown(row.rows())
    if row.shown is not None:
        return row.shown
    d = row.default
    if isinstance(d, (int, float)) and not isinstance(d, bool):
        return f"{d:g}"
    return f"`{json.dumps(d) if isinstance(d, (dict, list)) else d}`"


def doc_cell(row: Key) -> str:
    return row.doc(row.rows()) if callable(row.doc) else row.doc


def table() -> str:
    """The Markdown table: one line per row of KEYS, in the order parse reads them."""
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    for row in KEYS:
        cells = (key_cell(row), default_cell(row), doc_cell(row))
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def documented_keys(text: str) -> set[str]:
    """The context keys a docs table names: each single key, each family's key per id it lists."""
    out: set[str] = set()
    for line in text.splitlines()[2:]:
        cell = line.split(" | ", 1)[0].removeprefix("| ")
        name, _, ids = cell.partition(" (")
        name = name.strip("`")
        if ID not in name:
            out.add(name)
            continue
        listed = ids.rstrip(")")
        for bid in (BACKENDS if listed == EVERY_ID else listed.split(", ")):
            out.add(name.replace(ID, bid))
    return out


def rewrite(text: str) -> str:
    """``text`` with the table between the markers replaced by the rendered one."""
    head, found, rest = text.partition(BEGIN + "\n")
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise DocError(f"{PATH}: no '{BEGIN}' ... '{END}' markers; add them where the context-key table goes")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def stale(root: Path = ROOT) -> list[str]:
    """One line when the file's table disagrees with the keys table (empty: it agrees)."""
    text = (root / PATH).read_text(encoding="utf-8")
    if rewrite(text) != text:
        return [f"{PATH}: the context-key table disagrees with kit/config.py KEYS; run {COMMAND}"]
    return []


def write(root: Path = ROOT) -> list[str]:
    """Rewrite the table; the paths it changed."""
    path = root / PATH
    text = path.read_text(encoding="utf-8")
    new = rewrite(text)
    if new == text:
        return []
    path.write_text(new, encoding="utf-8")
    return [PATH]


main = generated_docs_command("kit.config_doc", "Render the context-key table of docs/stacks.md.", root=ROOT,
                              stale=stale, write=write, agrees=f"{PATH} agrees with kit/config.py KEYS",
                              show=table)


if __name__ == "__main__":
    sys.exit(main())
