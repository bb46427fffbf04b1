"""Add backends as catalog rows and synthesize the kit with them, as editing kit/catalog.py would.

    templates = synth_with_rows(tmp_path, [G6E], backends="bedrock,...,g6e")

Each row is a dict: ``like`` (an existing row to copy), ``before`` (optional: insert the row ahead
of that id, as if typed above it in kit/catalog.py; default: last) and any ``Backend`` fields to
change (``id`` at least; lists become tuples). It runs in a fresh Python process in which the rows
are put into ``kit.catalog.BACKENDS`` (and ``BACKEND_IDS``; tests/kit/extra_rows.py ``put``) before
any other module of the kit is imported, so everything derived from the catalog at import time (kit.config's known keys and
default backend list, kit.variants, the regions) sees them, exactly as for a row in the file; then
``tests.stacks.conftest.synth`` builds the app as app.py does (cdk.json context plus ``context``,
the fixed clock), cdk-nag included. Returns stack name -> template. About the time of one synthesis
(~5 s on 2 cores). A config error comes back as ``RowSynthError`` with the kit's one line.

Used by the subnet-plan and backend-row tests; written for any "a backend is one catalog row" test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kit import subnets

ROOT = Path(__file__).resolve().parents[2]

# A G6e backend (L40S, 48 GB): the g6 row on another instance type, with its own subnet blocks: the
# first four that no catalog row declares (kit/subnets.py free_blocks), so a row added to the
# catalog never collides with this one.
G6E: dict[str, Any] = {"like": "g6", "id": "g6e", "stack_name": "G6eStack", "label": "vLLM on EC2 g6e (L40S)",
                       "instance_type": "g6e.xlarge", "color": "#17becf",
                       "subnet_blocks": subnets.free_blocks()[:4]}

_CHILD = r"""
import json, sys
from pathlib import Path

spec = json.loads(Path(sys.argv[1]).read_text())

from tests.kit.extra_rows import put

put({"backends": spec["rows"]})  # first: nothing else of the kit has read the catalog yet

from kit.config import ConfigError
from tests.stacks.conftest import synth
try:
    k = synth(Path(spec["outdir"]), **spec["context"])
except ConfigError as e:
    Path(spec["result"]).write_text(json.dumps({"error": str(e)}))
else:
    Path(spec["result"]).write_text(json.dumps({"templates": k.templates}))
"""


class RowSynthError(Exception):
    """The kit refused the configuration; str(e) is its one line."""


def synth_with_rows(tmp_path: Path, rows: list[dict[str, Any]], **context: Any) -> dict[str, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = tmp_path / "rows.json"
    result = tmp_path / "result.json"
    spec.write_text(json.dumps({"rows": rows, "context": context, "outdir": str(tmp_path / "cdk.out"),
                                "result": str(result)}))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(spec)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    if proc.returncode != 0 or not result.exists():
        raise AssertionError(f"synthesis with rows failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(result.read_text())
    if "error" in out:
        raise RowSynthError(out["error"])
    return out["templates"]
