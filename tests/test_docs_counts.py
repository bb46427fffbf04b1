"""A count of backends written in prose (README.md, docs/**/*.md, pyproject.toml) is the catalog's
count: "six backends" went stale the day a seventh row was added to kit/catalog.py. The docs say
"the backends" or "every backend" instead; where a number is written, this test holds it to
len(BACKENDS) ("N EC2 backends": the EC2 rows)."""
from __future__ import annotations

import re
from pathlib import Path

from kit.catalog import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = {w: i for i, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                       "nine", "ten", "eleven", "twelve"])}
COUNT = re.compile(r"\b(" + "|".join(NUMBERS) + r"|\d+)\s+(?:AWS\s+)?(?:inference\s+)?(EC2\s+)?backends\b",
                   re.IGNORECASE)


def wrong_counts(text: str, where: str) -> list[str]:
    """'where:line: "six backends" but the catalog has 7' for each count that is not the catalog's."""
    want = {False: len(BACKENDS), True: sum(b.service == "ec2" for b in BACKENDS.values())}
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in COUNT.finditer(line):
            word, ec2 = m.group(1).lower(), bool(m.group(2))
            said = int(word) if word.isdigit() else NUMBERS[word]
            if said != want[ec2]:
                out.append(f"{where}:{n}: {m.group(0)!r} but kit/catalog.py has {want[ec2]}"
                           f"{' EC2' if ec2 else ''} backends; say 'the backends' or 'every backend'")
    return out


def test_prose_counts_of_backends_are_the_catalogs():
    files = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [p for f in files for p in wrong_counts(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert found == []


def test_the_check_finds_a_stale_count():
    n, ec2 = len(BACKENDS), sum(b.service == "ec2" for b in BACKENDS.values())
    text = f"one model, {n + 1} backends\nDeploy on {n} AWS inference backends; the {ec2 + 1} EC2 backends share"
    assert [p.split(":")[1] for p in wrong_counts(text, "README.md")] == ["1", "2"]
    assert wrong_counts(f"{n} backends, {ec2} EC2 backends", "x") == []
    word = [w for w, i in NUMBERS.items() if i == n - 1][0].capitalize()  # a row fewer, in words
    assert wrong_counts(f"{word} backends", "x") == [
        f"x:1: '{word} backends' but kit/catalog.py has {n} backends; say 'the backends' or 'every backend'"]
