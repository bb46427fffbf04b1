"""The backend and price tables in README.md and docs/stacks.md are the catalog and the dated price
snapshot, rendered (harness/cost/tables.py): a price is typed once, in the snapshot, and shown with
the region the snapshot records it for (the README's column once said us-east-1 over four prices
the snapshot holds for us-east-2). These tests fail when a file disagrees, and say the command that
fixes it."""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from kit.catalog import BACKENDS, INSTANCES
from kit.regions import DEFAULT_REGION

from harness.cost import tables
from harness.cost.prices import load_snapshot

ROOT = Path(__file__).resolve().parents[2]


def generated_rows(path: Path, name: str) -> dict[str, list[str]]:
    """First cell (backquotes dropped) -> the cells, for the rows of the file's generated table."""
    text = path.read_text(encoding="utf-8")
    body = text.split(f"<!-- generated: {name} ", 1)[1].split(f"<!-- end generated: {name} -->", 1)[0]
    rows = [line.strip("| ").split(" | ") for line in body.splitlines()[1:] if line.startswith("| ")]
    return {cells[0].strip("`"): cells for cells in rows[2:]}  # past the header and the rule


def snapshot_price(b, snapshot: dict) -> str:
    """The cell the row must show, read from the snapshot's JSON directly: the kit's default
    region when the snapshot holds the type there, else the region it does hold."""
    if b.instance_type is None:
        (row,) = [r for r in snapshot["bedrock"] if r["model_id"] == b.model_id]
        return f"${row['usd_per_m_input']:g} / ${row['usd_per_m_output']:g} per M tokens in / out ({row['region']})"
    rows = [r for r in snapshot["instances"] if r["instance_type"] == b.instance_type]
    row = next((r for r in rows if r["region"] == DEFAULT_REGION), rows[0])
    return f"${row['usd_per_hour']}/h ({row['region']})"


def test_readme_and_the_stacks_doc_agree_with_the_catalog_and_the_snapshot():
    assert tables.stale() == []


def test_every_backend_is_a_row_priced_as_the_snapshot_records_it():
    snapshot = load_snapshot()
    readme = generated_rows(ROOT / "README.md", "backends")
    stacks = generated_rows(ROOT / "docs/stacks.md", "stacks")
    assert list(readme) == list(BACKENDS)
    assert list(stacks) == [b.stack_name for b in BACKENDS.values()]
    for b in BACKENDS.values():
        assert readme[b.id][-1] == stacks[b.stack_name][-1] == snapshot_price(b, snapshot), b.id
    # the seed's rehearsal ran in us-east-2 (harness/cost/price_snapshot.json): said so, per price
    assert readme["g6"][-1] == "$0.8048/h (us-east-2)" and readme["g5g"][-1] == "$0.556/h (us-east-1)"
    assert "(us-east-1) |" not in (ROOT / "README.md").read_text().split("\n| id |", 1)[1].split("\n", 1)[0]


def test_every_backend_has_its_instance_row_and_a_snapshot_price():
    """What adding a backend takes (docs/adding-a-backend.md): its catalog row, its instance row
    and its price row. A row without either would render 'not in ... INSTANCES' or 'none in the
    snapshot' in the tables."""
    snapshot = load_snapshot()
    for b in BACKENDS.values():
        if b.instance_type:
            assert b.instance_type in INSTANCES, b.id
            assert [r for r in snapshot["instances"] if r["instance_type"] == b.instance_type
                    and r["usd_per_hour"] is not None], b.id
        else:
            assert [r for r in snapshot["bedrock"] if r["model_id"] == b.model_id], b.id


@pytest.fixture()
def copy_root(tmp_path):
    for block in tables.BLOCKS:
        (tmp_path / block.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / block.path, tmp_path / block.path)
    return tmp_path


def test_a_changed_price_is_named_per_file_and_write_puts_it_in(copy_root):
    snapshot = copy.deepcopy(load_snapshot())
    (g6,) = [r for r in snapshot["instances"] if r["instance_type"] == "g6.xlarge"]
    g6["usd_per_hour"], g6["region"] = 0.9, "us-west-2"
    assert tables.stale(copy_root, snapshot) == [
        f"README.md: the backends table disagrees with kit/catalog.py and the price snapshot dated "
        f"{snapshot['as_of']}; run python -m harness.cost.tables --write",
        f"docs/stacks.md: the stacks table disagrees with kit/catalog.py and the price snapshot dated "
        f"{snapshot['as_of']}; run python -m harness.cost.tables --write"]
    assert tables.write(copy_root, snapshot) == ["README.md", "docs/stacks.md"]
    assert tables.stale(copy_root, snapshot) == []
    assert generated_rows(copy_root / "README.md", "backends")["g6"][-1] == "$0.9/h (us-west-2)"
    # nothing outside the markers moved
    before = (ROOT / "README.md").read_text().split("<!-- generated: backends ")[0]
    assert (copy_root / "README.md").read_text().split("<!-- generated: backends ")[0] == before


def test_cli_check_and_write(copy_root, capsys):
    assert tables.main(["--check", "--root", str(copy_root)]) == 0
    readme = copy_root / "README.md"
    readme.write_text(readme.read_text().replace("$0.8048/h (us-east-2)", "$0.8048/h (us-east-1)"))
    assert tables.main(["--check", "--root", str(copy_root)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and err.startswith("README.md: the backends table disagrees")
    assert tables.main(["--write", "--root", str(copy_root)]) == 0
    assert capsys.readouterr().out == "rewrote README.md\n"
    assert tables.main(["--check", "--root", str(copy_root)]) == 0


def test_a_file_without_its_markers_is_one_line(copy_root, capsys):
    readme = copy_root / "README.md"
    readme.write_text(readme.read_text().replace("<!-- end generated: backends -->", ""))
    assert tables.main(["--check", "--root", str(copy_root)]) == 2
    err = capsys.readouterr().err
    assert err == ("harness.cost.tables: README.md: no '<!-- generated: backends (python -m harness.cost.tables "
                   "--write) -->' ... '<!-- end generated: backends -->' markers; add them where the backends "
                   "table goes\n")


# An hourly price typed in prose (an example output, a worked break-even) names a type or a
# backend id right before it: "g6.xlarge $0.8048/h", "g6 $0.8048/h". Each such figure must be a
# price the snapshot holds for that type (in some region), so a new snapshot cannot leave an old
# figure standing in the docs.
_PRICE_AFTER = r"(?<![\w.-]){name}[ ,:(]*\$([0-9]+(?:\.[0-9]+)?)/h"


def _typed_prices(text: str, snapshot: dict) -> list[tuple[str, float, set[float]]]:
    import re

    known: dict[str, set[float]] = {}
    for r in snapshot["instances"]:
        known.setdefault(r["instance_type"], set()).update([float(r["usd_per_hour"])] if r["usd_per_hour"] is not None else [])
    names = dict(known)
    names.update({b.id: known.get(b.instance_type or "", set()) for b in BACKENDS.values() if b.instance_type})
    out = []
    for name, prices in names.items():
        for m in re.finditer(_PRICE_AFTER.format(name=re.escape(name)), text):
            out.append((name, float(m.group(1)), prices))
    return out


def test_prices_typed_in_prose_are_the_snapshots():
    import subprocess

    snapshot = load_snapshot()
    docs = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()
    wrong, seen = [], 0
    for rel in docs:
        for name, price, prices in _typed_prices((ROOT / rel).read_text(encoding="utf-8"), snapshot):
            seen += 1
            if price not in prices:
                wrong.append(f"{rel}: {name} ${price:g}/h, the snapshot has {sorted(prices) or 'no price'}")
    assert seen, "no typed price found: the pattern no longer matches the docs"
    assert not wrong, "\n".join(wrong)


def test_a_typed_price_off_the_snapshot_is_found():
    snapshot = load_snapshot()
    g6 = next(b for b in BACKENDS.values() if b.id == "g6")
    found = _typed_prices(f"est. $0.17 so far ({g6.instance_type} $0.9999/h); g6 $0.8048/h", snapshot)
    assert [(n, p, p in ps) for n, p, ps in found] == [(g6.instance_type, 0.9999, False), ("g6", 0.8048, True)]
