"""manifest.json: what a package holds, where it came from, and the sha256 of every file."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "inference-kit-package/1"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_of(work: Path, src, scheme, before: dict, after: dict, tables: list[dict],
                ignore_check: dict, notes: list[str], ct_version: str, read_per_token: int) -> dict:
    """The manifest of the package in ``work`` (its files hashed as they are now); the build
    writes it last, as ``MANIFEST``."""
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
    return manifest


def verify(directory: Path) -> list[str]:
    """Problems with a package directory's files against its manifest (empty: intact). The
    manifest may be hostile: read bounded, and only names of regular files directly in
    ``directory`` are hashed (never ``../x`` or a FIFO)."""
    from harness.package.checkpoint import read_json, regular_file
    from harness.package.errors import PackageError

    m = read_json(directory / MANIFEST, directory)
    files = m.get("files") if isinstance(m, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise PackageError(f"{directory / MANIFEST}: no \"files\" object (file name -> bytes and sha256)")
    problems = []
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != MANIFEST}
    for name, meta in files.items():
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            problems.append(f"{MANIFEST}: entry {name!r} is not a file name in the package; not read")
            continue
        p = directory / name
        if not os.path.lexists(p):
            problems.append(f"{name}: missing")
            continue
        try:
            regular_file(p, directory)
        except PackageError as e:
            problems.append(str(e))
            continue
        if sha256_file(p) != meta.get("sha256"):
            problems.append(f"{name}: sha256 differs from the manifest")
    for extra in sorted(present - set(files)):
        problems.append(f"{extra}: not in the manifest")
    return problems
