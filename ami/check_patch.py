"""Check that the Turing shared-memory patch applies to the pinned vLLM source distribution.

    python -m ami.check_patch            # prints one line, exit 0 when the patch applies

Fetches vllm-<VLLM_VERSION>.tar.gz (the sdist, never a wheel) from PyPI through its JSON API,
checks its sha256 against kit/pins.py, caches it under .cache/sdists/ (gitignored), unpacks
only the files the patch touches plus the files whose pins we check, and applies the patch
with `patch -p1` (a dry run first). The image build does the same on the build host.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

from kit import pins

ROOT = Path(__file__).resolve().parent.parent
PATCH = Path(__file__).resolve().parent / "patches" / pins.SM75_PATCH
CACHE = ROOT / ".cache" / "sdists"
PYPI_JSON = "https://pypi.org/pypi/{name}/json"
# Files read besides the ones the patch touches: the torch pin lives there.
PIN_FILES = ("requirements/cuda.txt", "pyproject.toml")


class PatchCheckError(RuntimeError):
    """The sdist could not be fetched or verified, or the patch does not apply."""


def patched_paths(patch: Path = PATCH) -> list[str]:
    """Source paths (relative to the sdist root) that the patch modifies."""
    paths = re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.M)
    if not paths:
        raise PatchCheckError(f"{patch.name} has no '+++ b/<path>' headers")
    return paths


def sdist_url(name: str, version: str) -> tuple[str, str]:
    """(url, sha256) of the sdist of name==version, from PyPI's JSON API."""
    with urllib.request.urlopen(PYPI_JSON.format(name=name), timeout=60) as r:
        meta = json.load(r)
    files = meta.get("releases", {}).get(version, [])
    sdists = [f for f in files if f.get("packagetype") == "sdist"]
    if not sdists:
        raise PatchCheckError(f"PyPI lists no sdist for {name}=={version}")
    # Mirrors may return URLs relative to the JSON document.
    return urljoin(PYPI_JSON.format(name=name), sdists[0]["url"]), sdists[0]["digests"]["sha256"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(version: str = pins.VLLM_VERSION, sha256: str = pins.VLLM_SDIST_SHA256,
                cache: Path = CACHE) -> Path:
    """Path of the cached vllm sdist, downloaded once and verified against the pinned sha256."""
    target = cache / f"vllm-{version}.tar.gz"
    if target.exists() and _sha256(target) == sha256:
        return target
    url, listed = sdist_url("vllm", version)
    if listed != sha256:
        raise PatchCheckError(f"PyPI sha256 of vllm-{version}.tar.gz is {listed}, pinned {sha256}")
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=300) as r, partial.open("wb") as f:
        shutil.copyfileobj(r, f)
    if _sha256(partial) != sha256:
        partial.unlink()
        raise PatchCheckError(f"downloaded vllm-{version}.tar.gz does not match the pinned sha256")
    partial.replace(target)
    return target


def extract(sdist: Path, members: list[str], dest: Path) -> Path:
    """Unpack the given sdist-relative paths into dest; returns the source root."""
    prefix = sdist.name.removesuffix(".tar.gz") + "/"
    wanted = {prefix + m for m in members}
    with tarfile.open(sdist) as tar:
        found = [m for m in tar.getmembers() if m.name in wanted]
        missing = wanted - {m.name for m in found}
        if missing:
            raise PatchCheckError(f"{sdist.name} lacks {', '.join(sorted(missing))}")
        tar.extractall(dest, members=found, filter="data")
    return dest / prefix.rstrip("/")


def apply_patch(src_root: Path, patch: Path = PATCH) -> None:
    """Dry-run, then apply, the patch with -p1 in src_root. Raises with patch's own output."""
    patch_bin = shutil.which("patch")
    if not patch_bin:
        raise PatchCheckError("the 'patch' program is not installed (apt-get install patch)")
    for extra in (["--dry-run"], []):
        r = subprocess.run([patch_bin, "-p1", "--forward", "--batch", *extra, "-i", str(patch)],
                           cwd=src_root, capture_output=True, text=True)
        if r.returncode != 0:
            out = (r.stdout + r.stderr).strip().replace("\n", " | ")
            raise PatchCheckError(f"{patch.name} does not apply to vllm-{pins.VLLM_VERSION}: {out}")


def patched_tree(dest: Path, sdist: Path | None = None) -> Path:
    """Fetch (or reuse) the sdist, unpack what is needed into dest and apply the patch."""
    sdist = sdist or fetch_sdist()
    root = extract(sdist, [*patched_paths(), *PIN_FILES], dest)
    apply_patch(root)
    return root


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            root = patched_tree(Path(tmp))
        except (PatchCheckError, OSError) as e:
            print(f"patch check failed: {e}", file=sys.stderr)
            return 1
        print(f"{PATCH.name} applies cleanly to vllm-{pins.VLLM_VERSION} "
              f"({', '.join(patched_paths())}; sdist {root.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
