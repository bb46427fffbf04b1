"""The one reader of a JSON file a user names: cdk.json (``--cdk-json`` of deploy, images,
leftovers and preflight, and the default one every command resolves its region from) and a
model's config.json (``plan --model PATH``).

Bounded and never silent: only a regular file is read (a FIFO never blocks the open, /dev/zero
is refused, not read for ever), at most ``MAX_BYTES`` of it; it must be UTF-8 JSON nested at most
``MAX_DEPTH`` deep (Python's parser recurses: a document 100,000 deep is a RecursionError, not a
one-line error, without the guard). Every failure is a ``JsonFileError`` whose text is one line
that names the file and says what is wrong with it; no caller falls back to a default on one.

Plain Python, standard library only: the CDK app, the harness and preflight all read with it.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from kit.errors import KitError

MAX_BYTES = 4 * 1024 * 1024  # cdk.json and a config.json are kilobytes
MAX_DEPTH = 64  # neither nests deeper than ~5


class JsonFileError(KitError, ValueError):
    """A JSON file that cannot be used; str(e) is the one line to show (it names the file)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: Path | str, *, label: str = "", cap: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (a symlink to one is followed: the user named it),
    at most ``cap``. ``label`` (e.g. ``--cdk-json``) prefixes the path in errors."""
    where = f"{label} {path}" if label else str(path)
    try:  # O_NONBLOCK: a FIFO does not block the open; it is refused right after
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise JsonFileError(f"{where}: no such file") from None
    except OSError as e:
        why = "a symbolic link loop" if e.errno == errno.ELOOP else (e.strerror or type(e).__name__)
        raise JsonFileError(f"{where}: cannot read ({why})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JsonFileError(f"{where}: {_kind(st.st_mode)}, not a JSON file")
        data = b""
        while len(data) <= cap:
            chunk = os.read(fd, cap + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as e:
        raise JsonFileError(f"{where}: cannot read ({e.strerror or type(e).__name__})") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise JsonFileError(f"{where}: larger than {_size(cap)}, not read (the kit's JSON files are kilobytes)")
    return data


def parse(raw: bytes | str, where: str) -> Any:
    """JSON from ``raw``; JsonFileError naming ``where`` when it is not UTF-8, not JSON (an
    integer of more than 4,300 digits included) or nested deeper than MAX_DEPTH."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as e:
        raise JsonFileError(f"{where}: not UTF-8 text (byte {e.start})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise JsonFileError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise JsonFileError(f"{where}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise JsonFileError(f"{where}: not JSON the kit reads ({str(e).split(';')[0]})") from None
    if depth(data) > MAX_DEPTH:
        raise JsonFileError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    return data


def depth(obj: Any) -> int:
    """How deep lists and objects nest in ``obj``, counted without recursion (stops past MAX_DEPTH)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            o = list(o.values())
        if isinstance(o, list):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((x, d + 1) for x in o)
    return deepest


def read_json(path: Path | str, *, label: str = "", cap: int = MAX_BYTES) -> Any:
    """``read_bytes`` then ``parse``: the JSON value of the file, or one JsonFileError line."""
    return parse(read_bytes(path, label=label, cap=cap), f"{label} {path}" if label else str(path))


def read_object(path: Path | str, *, label: str = "", cap: int = MAX_BYTES) -> dict[str, Any]:
    """``read_json`` of a file that must hold a JSON object."""
    data = read_json(path, label=label, cap=cap)
    if not isinstance(data, dict):
        where = f"{label} {path}" if label else str(path)
        raise JsonFileError(f"{where}: a JSON {json_type(data)}, not an object")
    return data


def json_type(v: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"
