"""The backend and price tables in README.md and docs/stacks.md, rendered from the catalog
(kit/catalog.py: BACKENDS, INSTANCES) and the dated price snapshot (price_snapshot.json), so a
price is typed once, in the snapshot, and shown with the region the snapshot records it for.

    python -m harness.cost.tables            # print both tables
    python -m harness.cost.tables --write    # rewrite them in README.md and docs/stacks.md
    python -m harness.cost.tables --check    # exit 1, one line per file, when a file disagrees

Each table sits between two HTML comments in its file (invisible on GitHub)::

    <!-- generated: backends (python -m harness.cost.tables --write) -->
    ...
    <!-- end generated: backends -->

Run ``--write`` after adding a catalog row, an instance row or a snapshot price, or after
``python -m harness.cost snapshot``; tests/cost/test_tables.py fails until the files agree.
Prices are the snapshot's, never live: the docs must not change with the reader's credentials.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit import catalog
from kit.image_families import image_family
from kit.regions import DEFAULT_REGION

from harness.cost.prices import PriceBook, Quote, bedrock_price_list_model, load_snapshot
from kit.cli import generated_docs_command
from kit.errors import KitError

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m harness.cost.tables --write"


def _price(q: Quote) -> str:
    """One price cell: the snapshot's figure as recorded, and the region it was recorded for."""
    if q.usd_per_m_output is not None:
        return f"${q.usd_per_m_input:g} / ${q.usd_per_m_output:g} per M tokens in / out ({q.region})"
    if q.usd_per_hour is not None:
        return f"${q.usd_per_hour}/h ({q.region})"
    return "none in the snapshot (live only)"


def quote(b: catalog.Backend, snapshot: dict) -> Quote:
    """The snapshot's price for the row's default: its instance type, or (Bedrock) its model. The
    kit's default region when the snapshot holds it there, else the region it holds."""
    book = PriceBook(None, snapshot)
    if b.instance_type:
        return book.instance(b.instance_type, DEFAULT_REGION)
    return book.bedrock(b.model_id, DEFAULT_REGION)


def accelerator(b: catalog.Backend, snapshot: dict) -> str:
    """The row's accelerators as INSTANCES records them (per-device memory and peak bandwidth)."""
    if not b.instance_type:
        return f"{bedrock_price_list_model(b.model_id, snapshot) or b.model_id} (managed)"
    spec = catalog.INSTANCES.get(b.instance_type)
    if spec is None:
        return f"not in kit/catalog.py INSTANCES ({b.instance_type})"
    chip = spec.chip
    if spec.neuron_cores:
        return f"{spec.neuron_cores} x {chip.name}, {spec.accel_memory_gib:g} GiB, {spec.bandwidth_gb_s:g} GB/s"
    count = f"{spec.accelerators} x " if spec.accelerators > 1 else ""
    return (f"{count}{chip.name}, {spec.accel_memory_gib / spec.accelerators:g} GB, "
            f"{spec.bandwidth_per_device_gb_s:g} GB/s")


def instance(b: catalog.Backend) -> str:
    """The row's default instance type, marked when its CPUs are not x86."""
    if not b.instance_type:
        return "—"
    arch = catalog.instance_arch(b.instance_type)
    return b.instance_type if arch == "x86_64" else f"{b.instance_type} ({arch})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def backends_table(snapshot: dict) -> str:
    """README.md: what each backend runs on, and its on-demand price."""
    rows = [[b.id, b.stack_name, instance(b), accelerator(b, snapshot), b.engine,
             "yes" if b.tool_calls else "no", _price(quote(b, snapshot))] for b in catalog.BACKENDS.values()]
    return _table(["id", "stack", "instance", "accelerator", "engine", "tools",
                   f"on-demand price (snapshot {snapshot['as_of']})"], rows)


def stacks_table(snapshot: dict) -> str:
    """docs/stacks.md: each backend's stack, what it boots, its root volume, its on-demand price."""
    rows = []
    for b in catalog.BACKENDS.values():
        volume = f"{image_family(b.image).root_volume_gib} GB gp3" if b.image else "—"
        rows.append([f"`{b.stack_name}`", instance(b), b.image or "—", b.engine, volume,
                     _price(quote(b, snapshot))])
    return _table(["stack", "instance", "image family", "engine", "root volume",
                   f"on-demand price (snapshot {snapshot['as_of']})"], rows)


@dataclass(frozen=True)
class Block:
    name: str
    path: str  # relative to the repository root
    render: Callable[[dict], str]

    @property
    def begin(self) -> str:
        return f"<!-- generated: {self.name} ({COMMAND}) -->"

    @property
    def end(self) -> str:
        return f"<!-- end generated: {self.name} -->"


BLOCKS = (Block("backends", "README.md", backends_table), Block("stacks", "docs/stacks.md", stacks_table))


class TableError(KitError, ValueError):
    """A file lacks its markers; str(e) is the one line to show."""


def rewrite(text: str, block: Block, snapshot: dict) -> str:
    """``text`` with the block's table replaced by the rendered one."""
    head, found, rest = text.partition(block.begin + "\n")
    _, found_end, tail = rest.partition(block.end)
    if not found or not found_end:
        raise TableError(f"{block.path}: no '{block.begin}' ... '{block.end}' markers; add them where the "
                         f"{block.name} table goes")
    return f"{head}{block.begin}\n{block.render(snapshot)}\n{block.end}{tail}"


def stale(root: Path = ROOT, snapshot: dict | None = None) -> list[str]:
    """One line per file whose table disagrees with the catalog and the snapshot (empty: all agree)."""
    snap = snapshot or load_snapshot()
    out = []
    for block in BLOCKS:
        text = (root / block.path).read_text(encoding="utf-8")
        if rewrite(text, block, snap) != text:
            out.append(f"{block.path}: the {block.name} table disagrees with kit/catalog.py and the price "
                       f"snapshot dated {snap['as_of']}; run {COMMAND}")
    return out


def write(root: Path = ROOT, snapshot: dict | None = None) -> list[str]:
    """Rewrite every block; the paths it changed."""
    snap = snapshot or load_snapshot()
    changed = []
    for block in BLOCKS:
        path = root / block.path
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, block, snap)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(block.path)
    return changed


def _show() -> str:
    snap = load_snapshot()
    return "\n\n".join(f"{b.path} ({b.name}):\n{b.render(snap)}" for b in BLOCKS)


main = generated_docs_command(
    "harness.cost.tables", "Render the backend and price tables of README.md and docs/stacks.md.", root=ROOT,
    stale=stale, write=write, agrees="README.md and docs/stacks.md agree with the catalog and the snapshot",
    show=_show)


if __name__ == "__main__":
    sys.exit(main())
