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

Reading a run back (cost and report both do): ``read_json``, ``endpoints_from_meta``,
``load_bench``. A hand-edited or foreign file of the wrong shape reads as missing, never as a
crash: a report must still render.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from harness.endpoint import saved_endpoint

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


def writable_problem(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` could not be written (None: it can), found without creating it: the nearest
    existing ancestor must be a directory this process can create a file in (probed with a
    temporary file, removed at once: as root, permission bits say little; /proc refuses all).
    ``directory``: ``path`` is to be a directory (else a file, which must not be a directory)."""
    path = Path(path)
    if path.exists():
        if directory and not path.is_dir():
            return f"{path} exists and is not a directory"
        if not directory and path.is_dir():
            return f"{path} is a directory"
    probe = path if directory and path.exists() else path.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    try:
        fd, name = tempfile.mkstemp(prefix=".write-probe-", dir=probe)
    except OSError as e:
        return f"cannot create files in {probe} ({e.strerror or type(e).__name__})"
    os.close(fd)
    os.unlink(name)
    return None


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


def read_json(path: Path) -> Any | None:
    """Parsed JSON, or None when the file is absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def endpoints_from_meta(meta: dict) -> dict[str, dict]:
    """Endpoint name -> its description in meta.json (a list of ``Endpoint.to_dict()``, or a
    name-keyed object in older runs), in today's words (``harness.endpoint.saved_endpoint``)."""
    eps = meta.get("endpoints") or {}
    if isinstance(eps, list):
        return {e["name"]: saved_endpoint(e) for e in eps if isinstance(e, dict) and isinstance(e.get("name"), str)}
    if not isinstance(eps, dict):
        return {}
    return {k: saved_endpoint({"name": k} | v) for k, v in eps.items() if isinstance(v, dict)}


def load_bench(results_dir: Path) -> dict[str, list[dict]]:
    """Endpoint name -> its levels from bench/<name>/summary.json (unusable levels skipped)."""
    out: dict[str, list[dict]] = {}
    bench = Path(results_dir) / "bench"
    if not bench.is_dir():
        return out
    for d in sorted(p for p in bench.iterdir() if p.is_dir()):
        data = read_json(d / "summary.json")
        if isinstance(data, dict):  # tolerate {"levels": [...]}
            data = data.get("levels")
        if isinstance(data, list):
            out[d.name] = [lv for lv in data if _usable_level(lv)]
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _usable_level(lv: Any) -> bool:
    """A dict whose load and throughput, when given, are numbers."""
    return isinstance(lv, dict) and all(_number(lv[k]) for k in ("concurrency", "rate", "output_tok_s")
                                        if lv.get(k) is not None)
