"""Put extra rows into the catalog and the price snapshot of this process, before anything reads
them, as typing them into kit/catalog.py and harness/cost/price_snapshot.json would.

Three kinds of row, the three a new backend takes (docs/adding-a-backend.md), given as JSON:

    {"backends":  [{"like": "g6", "id": "p3", "stack_name": "P3Stack", ..., "before": "g6"}],
     "instances": [{"like": "g6.xlarge", "name": "p3.2xlarge", "chip": {"like": "NVIDIA T4G", ...}}],
     "prices":    [{"service": "ec2", "instance_type": "p3.2xlarge", "region": ..., "usd_per_hour": ...}]}

A backend or instance row copies ``like`` and changes the fields given (lists become tuples);
``before`` inserts a backend row ahead of that id (default: last); an instance row's ``chip`` is a
chip's name, or a dict copying the chip ``like`` with fields changed. Price rows are appended to a
copy of the snapshot that ``harness.cost.prices.load_snapshot`` then reads by default.

Two ways in, both in a child process (the rows must be in place before any module derives a list
from the catalog at import time: kit.config's keys, tests/stacks/conftest.py's EC2_STACKS):

- ``put(spec)`` as the first thing a script does (tests/kit/catalog_rows.py);
- as a pytest plugin: ``KIT_EXTRA_ROWS=spec.json python -m pytest -p tests.kit.extra_rows ...``;
  pytest imports ``-p`` plugins before any conftest or test module.

Test code only: nothing in kit/ or harness/ knows about it.
"""
from __future__ import annotations

import atexit
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ENV = "KIT_EXTRA_ROWS"


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def put(spec: dict[str, Any]) -> None:
    import kit.catalog as catalog  # first: nothing else of the kit has read the catalog yet

    chips = {c.name: c for c in catalog.CHIPS}
    for row in spec.get("instances", []):
        row = dict(row)
        base = catalog.INSTANCES[row.pop("like")]
        chip = row.pop("chip", base.chip)
        if isinstance(chip, str):
            chip = chips[chip]
        elif isinstance(chip, dict):
            chip = dict(chip)
            chip = replace(chips[chip.pop("like")], **chip)
        catalog.INSTANCES[row["name"]] = replace(base, chip=chip, **{k: _tuples(v) for k, v in row.items()})

    rows = dict(catalog.BACKENDS)
    for row in spec.get("backends", []):
        row = dict(row)
        like, before = row.pop("like"), row.pop("before", None)
        new = replace(catalog.BACKENDS[like], **{k: _tuples(v) for k, v in row.items()})
        order = list(rows)
        order.insert(order.index(before) if before else len(order), new.id)
        rows[new.id] = new
        rows = {k: rows[k] for k in order}
    catalog.BACKENDS.clear()
    catalog.BACKENDS.update(rows)
    catalog.BACKEND_IDS = tuple(rows)

    if spec.get("prices"):
        from harness.cost import prices

        snapshot = prices.load_snapshot()
        snapshot["instances"] = [*snapshot["instances"], *spec["prices"]]
        fd, path = tempfile.mkstemp(prefix="price_snapshot-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(snapshot, f)
        atexit.register(os.unlink, path)
        # every reader calls load_snapshot() without a path (PriceBook's default, harness.cost.tables)
        prices.load_snapshot.__defaults__ = (Path(path),)


if os.environ.get(ENV):  # loaded as a pytest plugin (-p tests.kit.extra_rows)
    put(json.loads(Path(os.environ[ENV]).read_text()))
