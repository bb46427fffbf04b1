"""Read a safetensors checkpoint directory that may be damaged or hostile: bounded, inside it.

A build's source is usually a fresh download and sometimes a failed one (a truncated shard), and
``package check`` reads checkpoints from anywhere. Every way such a directory can be wrong is one
``PackageError`` line naming the file and what was expected, after bounded work:

- JSON files (config.json, the index, tokenizer_config.json, a manifest) are read only when they
  are regular files (never a FIFO, which would block, nor a device such as /dev/zero, which would
  be read forever), up to MAX_JSON_BYTES, UTF-8, nested at most MAX_DEPTH deep;
- every file read must lie inside the source directory. An index entry is a relative path with no
  ``..`` (checked on the name, before anything is opened), and any file's real path (symbolic
  links followed) must be inside the directory, or, for a Hugging Face cache snapshot
  (``.../snapshots/<revision>/``), inside that repository's ``blobs/``: huggingface_hub lays a
  snapshot out as symbolic links into it (huggingface_hub 2.4.0 ``file_download._create_symlink``:
  "README.md -> ../../../blobs/d7edf6bd...");
- shards are opened with the safetensors library itself, which validates the whole header on open
  (length, JSON, dtypes, every tensor's offsets against the file's size: a truncated shard is
  "incomplete metadata, file not fully covered", safetensors 0.8.0) and maps the data without
  reading it; only the header, names, dtypes and shapes are taken here.
"""
from __future__ import annotations

import json
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from harness.package.errors import PackageError

MAX_JSON_BYTES = 64 * 1024 * 1024  # an E2B index is ~100 KB; config.json a few KB
MAX_DEPTH = 64  # no config, index or manifest nests deeper than ~5
INDEX = "model.safetensors.index.json"
# safetensors dtype names (safetensors 0.8.0 Dtype, as get_slice().get_dtype() spells them) of the
# floating-point tensors a Gemma 4 checkpoint stores its weights in.
FLOAT_DTYPES = ("BF16", "F16", "F32")


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # safetensors' name: BF16, F32, I32, ...
    shape: tuple[int, ...]


def allowed_roots(d: Path) -> list[Path]:
    """Real directories the files of checkpoint directory ``d`` may live in."""
    real = Path(os.path.realpath(d))
    roots = [real]
    if real.parent.name == "snapshots":  # a Hugging Face cache snapshot: links into ../../blobs
        roots.append(real.parent.parent / "blobs")
    return roots


def inside(d: Path, rel: str, what: str) -> Path:
    """``d / rel`` for a relative name that stays inside ``d`` (checked on the name alone)."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise PackageError(f"{d}/{INDEX}: {what} {rel!r} is not a file name")
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or "\\" in rel:
        raise PackageError(f"{d}/{INDEX}: {what} {rel!r} points outside the checkpoint directory; "
                           "entries must be file names inside it")
    return d / rel


def regular_file(path: Path, d: Path) -> Path:
    """``path`` if it is a regular file whose real path is inside ``d`` (see allowed_roots)."""
    try:
        st = os.stat(path)  # follows links: a Hugging Face snapshot is made of them
    except FileNotFoundError:
        raise PackageError(f"{path}: missing") from None
    except OSError as e:
        raise PackageError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise PackageError(f"{path}: not a regular file (a directory, FIFO or device); not read")
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(r) for r in allowed_roots(d)):
        raise PackageError(f"{path}: a link to {real}, outside the checkpoint directory; not read "
                           "(copy the file into the directory)")
    return path


def _depth(obj: Any) -> int:
    """How deep containers nest (iteratively: no recursion on hostile input)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, level = stack.pop()
        if isinstance(o, dict):
            o = list(o.values())
        if isinstance(o, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((x, level + 1) for x in o)
    return deepest


def read_json(path: Path, d: Path | None = None) -> Any:
    """The JSON in ``path``, read bounded. ``d``: the directory it must be inside (None: the
    file was named by the user on the command line, where any regular file will do)."""
    path = Path(path)
    if d is not None:
        regular_file(path, d)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO does not block
    except FileNotFoundError:
        raise PackageError(f"{path}: missing") from None
    except OSError as e:
        raise PackageError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PackageError(f"{path}: not a regular file (a directory, FIFO or device); not read")
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(MAX_JSON_BYTES + 1)
        except OSError as e:
            raise PackageError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if len(raw) > MAX_JSON_BYTES:
        raise PackageError(f"{path}: larger than {MAX_JSON_BYTES // 2**20} MiB; not a JSON file this reads")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PackageError(f"{path}: not UTF-8 text; expected JSON") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise PackageError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise PackageError(f"{path}: not valid JSON ({str(e)[:80]})") from None
    if _depth(data) > MAX_DEPTH:
        raise PackageError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels")
    return data


@contextmanager
def open_shard(path: Path, d: Path) -> Iterator[Any]:
    """safetensors' ``safe_open`` on a shard inside ``d``; a damaged one is one line."""
    from safetensors import SafetensorError, safe_open

    regular_file(path, d)
    try:
        h = safe_open(str(path), framework="pt")
    except SafetensorError as e:
        raise PackageError(f"{path}: not a readable safetensors file ({_reason(e)}); "
                           "a truncated or damaged download: fetch it again") from None
    except OSError as e:
        raise PackageError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    with h:
        yield h


def _reason(e: Exception) -> str:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return msg.removeprefix("Error while deserializing header: ")[:160]


def _shard_tensors(path: Path, d: Path) -> dict[str, TensorInfo]:
    with open_shard(path, d) as h:
        out = {}
        for name in h.keys():
            sl = h.get_slice(name)
            out[name] = TensorInfo(path, sl.get_dtype(), tuple(sl.get_shape()))
        return out


def tensors(d: Path) -> dict[str, TensorInfo]:
    """Every tensor of the checkpoint in ``d`` -> its file, dtype and shape (headers only)."""
    index = d / INDEX
    if os.path.lexists(index):
        data = read_json(index, d)
        if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
            raise PackageError(f"{index}: no \"weight_map\" object (tensor name -> file name)")
        weight_map = data["weight_map"]
        if not weight_map:
            raise PackageError(f"{index}: \"weight_map\" is empty")
        files: dict[str, Path] = {}
        for name, rel in weight_map.items():
            if rel not in files:
                files[rel] = inside(d, rel, f"weight_map[{name!r}]")
        held = {rel: _shard_tensors(p, d) for rel, p in sorted(files.items())}
        out = {}
        for name, rel in weight_map.items():
            if name not in held[rel]:
                raise PackageError(f"{index}: names {name} in {rel}, which does not hold it")
            out[name] = held[rel][name]
        return out
    shards = sorted(p for p in d.glob("*.safetensors"))
    if not shards:
        raise PackageError(f"{d}: no {INDEX} and no *.safetensors file")
    out = {}
    for shard in shards:
        for name, info in _shard_tensors(shard, d).items():
            if name in out:
                raise PackageError(f"{name}: in both {out[name].file.name} and {shard.name}; "
                                   f"which one is meant? (an {INDEX} would say)")
            out[name] = info
    return out


def load(info: TensorInfo, name: str, d: Path):
    """The whole tensor ``name`` (a torch tensor)."""
    with open_shard(info.file, d) as h:
        return h.get_tensor(name)


def row_chunks(info: TensorInfo, name: str, d: Path, values: int) -> Iterator[tuple[int, Any]]:
    """``(first row, rows)`` of ``name``, about ``values`` values at a time (bounded memory even for
    the 262144 x 8960 per-layer table); a 0-D or 1-D tensor comes whole."""
    with open_shard(info.file, d) as h:
        if len(info.shape) < 2:
            yield 0, h.get_tensor(name)
            return
        rows = info.shape[0]
        per_row = 1
        for n in info.shape[1:]:
            per_row *= n
        step = max(1, values // max(per_row, 1))
        sl = h.get_slice(name)
        for r0 in range(0, rows, step):
            yield r0, sl[r0:r0 + step]
