"""Where results live and how records are appended, so a crash or Ctrl-C loses nothing.

Layout of one run (every report is re-rendered from these files alone):

    results/<run-id>/                 run-id: UTC YYYYmmdd-HHMMSS[-N]
      meta.json                       versions, config, region, endpoints, start/end
      agent_runs.jsonl                one line per agent-trial run
      scoreboard.json                 the scoreboard agent's table
      bench/<endpoint-name>/          one `python -m harness.bench --out` directory
        requests.jsonl, summary.json, summary.csv
      cost.json                       cost model output
      report.md, report.html
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

DEFAULT_ROOT = Path("results")


def new_run_dir(root: Path = DEFAULT_ROOT) -> Path:
    """A new, empty run directory; a second run in the same second gets ``-2``, ``-3``, …"""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{root}: no free run directory for {stamp}")


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk before returning."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (killed mid-write) is skipped."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
