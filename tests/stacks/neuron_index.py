"""A local package index of metadata-only wheels, built from tests/stacks/data/neuron_packages.json.

Each recorded package becomes a tiny wheel that carries the real package's declared requirements
(Requires-Dist, Requires-Python) and nothing else, in one PEP 503 simple index per origin: "pypi"
(stands for PyPI, the installer's default index), "torch-cpu" (download.pytorch.org/whl/cpu) and
"neuron" (pip.repos.neuron.amazonaws.com). A resolver run against these indexes meets the same
constraints as against the real ones, offline and in seconds.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "neuron_packages.json"
ORIGINS = ("pypi", "torch-cpu", "neuron")


def load_packages() -> list[dict]:
    return json.loads(DATA.read_text())["packages"]


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(pkg: dict, out_dir: Path) -> Path:
    """A py3-none-any wheel whose METADATA declares pkg's requirements; it installs no code."""
    dist = re.sub(r"[-.]+", "_", pkg["name"])
    version = pkg["version"]
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {pkg['name']}", f"Version: {version}"]
    if pkg.get("requires_python"):
        metadata.append(f"Requires-Python: {pkg['requires_python']}")
    metadata += [f"Requires-Dist: {req}" for req in pkg["requires_dist"]]
    files = {
        f"{info}/METADATA": ("\n".join(metadata) + "\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    return wheel


def build_indexes(root: Path, packages: list[dict] | None = None) -> dict[str, Path]:
    """One PEP 503 simple index per origin under root; returns origin -> the index's /simple dir."""
    packages = load_packages() if packages is None else packages
    unknown = {i for p in packages for i in p["indexes"]} - set(ORIGINS)
    if unknown:
        raise ValueError(f"unknown package origin(s) {sorted(unknown)} in {DATA.name}; valid: {', '.join(ORIGINS)}")
    indexes = {}
    for origin in ORIGINS:
        simple = root / origin / "simple"
        simple.mkdir(parents=True, exist_ok=True)
        by_project: dict[str, list[Path]] = {}
        for pkg in (p for p in packages if origin in p["indexes"]):
            project = normalize(pkg["name"])
            by_project.setdefault(project, []).append(build_wheel(pkg, simple / project))
        links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(by_project))
        (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
        for project, wheels in by_project.items():
            anchors = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(wheels))
            (simple / project / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n")
        indexes[origin] = simple
    return indexes
