"""Helpers for the hostile-input tables of python -m harness.package:
run the command in-process, assert the kit's error convention, rewrite a checkpoint's tensors
with the real safetensors writer, and craft damaged safetensors files byte by byte."""
from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import save_file

from harness.package.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
INDEX = "model.safetensors.index.json"


def run(argv: list[str], capsys, seconds: float = 60) -> tuple[int, str, str]:
    """``main(argv)`` in-process, under a deadline: a row that blocks (a FIFO) or works without
    bound (a 10,000,000-layer config) fails after ``seconds`` instead of holding the suite."""
    capsys.readouterr()
    with deadline(seconds):
        rc = main(argv)
    c = capsys.readouterr()
    return rc, c.out, c.err


@contextmanager
def deadline(seconds: float):
    """Fail instead of hanging: an input that blocks (a FIFO opened for reading) is interrupted by
    SIGALRM after ``seconds``, which raises here (pytest runs tests in the main thread)."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: the command blocked")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_process(argv: list[str], timeout: float = 60) -> tuple[int, str, str]:
    """The command as its own process: for inputs that could block (FIFOs), and to see that no
    traceback reaches the terminal."""
    r = subprocess.run([sys.executable, "-m", "harness.package", *argv], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def one_line(rc: int, err: str) -> str:
    """The convention: exit 2, exactly one line on stderr, no traceback."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert lines[0].startswith("error: ")
    return lines[0]


def weight_map(d: Path) -> dict[str, str]:
    return json.loads((d / INDEX).read_text())["weight_map"]


def rewrite(d: Path, tensors: dict[str, torch.Tensor], new_file: str | None = None) -> None:
    """Write ``tensors`` into the checkpoint or package in ``d`` with the real safetensors
    writer: names the index knows stay in their shard, new names go to the first shard (or
    ``new_file``), removed names leave the index."""
    wm = weight_map(d)
    first = sorted(set(wm.values()))[0]
    placed = {n: wm.get(n, new_file or first) for n in tensors}
    for f in set(wm.values()) | set(placed.values()):
        part = {n: t.contiguous() for n, t in tensors.items() if placed[n] == f}
        if part:
            save_file(part, str(d / f), metadata={"format": "pt"})
        elif (d / f).exists():
            (d / f).unlink()
    index = json.loads((d / INDEX).read_text())
    index["weight_map"] = dict(sorted(placed.items()))
    (d / INDEX).write_text(json.dumps(index))


def read_all(d: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    out = {}
    for f in sorted(set(weight_map(d).values())):
        with safe_open(str(d / f), framework="pt") as h:
            for n in h.keys():
                out[n] = h.get_tensor(n)
    return out


def edit_config(d: Path, edit) -> None:
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


def header_of(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def raw_shard(path: Path, header, data: bytes, length: int | None = None) -> None:
    """A safetensors file with any header (dict, list or bytes) and any declared header length."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h) if length is None else length) + h + data)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst
