"""manifest.json: what a package holds, where it came from, and the sha256 of every file."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "inference-kit-package/1"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(work: Path, src, scheme, before: dict, after: dict, tables: list[dict],
                   ignore_check: dict, notes: list[str], ct_version: str, read_per_token: int) -> dict:
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(work.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {
        "format": MANIFEST_FORMAT,
        "source": {"id": src.id, "revision": src.revision},
        "scheme": scheme.name,
        "scheme_summary": scheme.summary,
        "compressed_tensors_version": ct_version,
        "bytes": {**after, "total": sum(after.values())},
        "source_bytes": {**before, "total": sum(before.values())},
        "bytes_read_per_token": read_per_token,  # weights one decode step reads (harness/package/reads.py)
        "tables": tables,
        "ignore_check": ignore_check,
        "notes": notes,
        "files": files,
    }
    (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def verify(directory: Path) -> list[str]:
    """Problems with a package directory's files against its manifest (empty: intact)."""
    m = json.loads((directory / MANIFEST).read_text())
    problems = []
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != MANIFEST}
    for name, meta in m["files"].items():
        p = directory / name
        if not p.is_file():
            problems.append(f"{name}: missing")
        elif sha256_file(p) != meta["sha256"]:
            problems.append(f"{name}: sha256 differs from the manifest")
    for extra in sorted(present - set(m["files"])):
        problems.append(f"{extra}: not in the manifest")
    return problems
