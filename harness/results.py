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

Each file's ``schema_version`` and shape are its contract in kit/contracts/results.py; writers
and readers go through ``write_file``, ``append_record``, ``read_file`` and ``read_records``
below, the one place a results file is written or read with its contract.

Reading a run back (cost and report both do): ``read_file``, ``read_records``,
``endpoints_from_meta``, ``load_bench``. A hand-edited or foreign file of the wrong shape reads
as missing, never as a crash: a report must still render.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from collections import Counter
from typing import Any, Iterator

from harness.endpoint import saved_endpoint
from kit.contracts.results import BENCH_SUMMARY, ResultsFile
from kit.jsonfile import MAX_DEPTH, depth  # one nesting rule for every JSON the kit reads

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
    if directory and path.is_symlink() and not path.exists():  # mkdir would fail (FileExistsError)
        return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
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


class NotAppendable(OSError):
    """A JSONL file that is not appended to: a symbolic link, or not a regular file."""


# O_RDWR: the last byte is read to see whether the file ends a line. O_NOFOLLOW: a symlink planted as the file (pointing outside the results directory) is refused,
# not written through (ELOOP). O_NONBLOCK: a FIFO planted there never blocks the open (ENXIO
# without a reader; anything but a regular file is refused right after).
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` (whole lines) to the regular file ``path`` and fsync it. Never through a
    symbolic link (``NotAppendable``). A file whose last line has no newline (the process was
    killed mid-write) gets one first: the torn line stays a line of its own, which readers skip,
    and the first record written after a crash is not glued onto it and lost. A write that fails
    part way (a full disk, a file size limit) is cut back to its last whole line, then raised:
    the whole records of a batch stay, no half one is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, _APPEND, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):
            raise NotAppendable(e.errno, "a symbolic link or special file: not written through",
                                str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAppendable(errno.EINVAL, "not a regular file: not written to", str(path))
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:  # a full disk, a file size limit: the whole lines stay, no half one
            done = len(data) - len(view)
            try:
                os.ftruncate(fd, st.st_size + data.rfind(b"\n", 0, done) + 1)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record on a line of its own and flush it to disk before returning
    (``append_bytes``: never through a symlink, never onto a torn last line)."""
    append_bytes(path, (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8"))


def appendable_problem(path: Path) -> str | None:
    """Why ``append_bytes`` would refuse ``path`` (None: absent, or a regular file), checked
    without following a symlink, so a command can say so before it measures anything."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link: not written through; move it away or use another directory"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file; move it away or use another directory"
    return None


# -- reading a results directory that may come from someone else -------------------------------
# A results directory can be handed over (a tarball, a shared disk): its files are untrusted.
# Every read below opens the file with O_NOFOLLOW, through directories opened with O_NOFOLLOW
# from the run directory down (so a symlink anywhere below it is never followed), and
# O_NONBLOCK (a FIFO never blocks the open); only a regular file is read, and only up to a cap
# (a symlink to /dev/zero would otherwise be read forever). JSON nested deeper than MAX_DEPTH is
# refused (Python's parser and every renderer recurse). What is skipped is said in ``notes``.
MAX_JSON_BYTES = 64 * 1024 * 1024  # meta.json, summary.json, cost.json … are kilobytes
MAX_LINE_BYTES = 16 * 1024 * 1024  # one JSONL record
MAX_JSONL_BYTES = 1024 * 1024 * 1024  # a whole JSONL file (requests.jsonl of a long sweep)


class Skipped(Exception):
    """A file that exists but is not read; the message says why, in a few words."""


def _open_inside(root: Path, rel: Path) -> int | None:
    """An fd of the regular file ``root/rel``, reached without following any symlink below
    ``root``; None when absent; ``Skipped`` when it is not a regular file inside ``root``."""
    parts = rel.parts
    if not parts or rel.is_absolute() or ".." in parts:
        raise Skipped("outside the results directory")
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Skipped(e.strerror or str(e)) from None
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, flags | os.O_DIRECTORY, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise Skipped(f"{part}/ is a symbolic link or not a directory: not followed") from None
                raise Skipped(e.strerror or str(e)) from None
            os.close(dfd)
            dfd = nfd
        try:
            fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise Skipped("a symbolic link: not followed") from None
            raise Skipped(e.strerror or str(e)) from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Skipped("not a regular file")
    return fd


def _split(path: Path, root: Path | None) -> tuple[Path, Path]:
    path = Path(path)
    if root is None:
        return path.parent, Path(path.name)
    root = Path(root)
    try:
        return root, path.relative_to(root)
    except ValueError:
        raise Skipped("outside the results directory") from None


def _note(notes: list[str] | None, path: Path, why: str) -> None:
    if notes is not None:
        notes.append(f"{path}: skipped ({why})")


def read_bytes(path: Path, *, root: Path | None = None, cap: int = MAX_JSON_BYTES) -> bytes | None:
    """The bytes of a regular file inside ``root`` (default: its own directory) read without
    following symlinks; None when absent; ``Skipped`` when it may not or cannot be read."""
    base, rel = _split(path, root)
    fd = _open_inside(base, rel)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise Skipped(f"larger than {cap // (1024 * 1024)} MiB")
    return data


def parse_json(raw: bytes) -> Any:
    """JSON from bytes; ``Skipped`` for non-UTF-8, invalid JSON or nesting past MAX_DEPTH."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Skipped("not UTF-8") from None
    try:  # CPython's parser counts its recursion: a deep document is a RecursionError, not a crash
        data = json.loads(text)
    except RecursionError:
        raise Skipped(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise Skipped(f"not valid JSON: {str(e)[:80]}") from None
    if depth(data) > MAX_DEPTH:
        raise Skipped(f"JSON nested deeper than {MAX_DEPTH} levels")
    return data


def read_jsonl(path: Path, *, root: Path | None = None, notes: list[str] | None = None,
               cap: int = MAX_JSONL_BYTES) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per line. A torn last line (killed mid-write), a
    line that is not UTF-8, not JSON, too deep, longer than MAX_LINE_BYTES or not an object is
    skipped; with ``notes``, a line there says how many and why."""
    path = Path(path)
    try:
        base, rel = _split(path, root)
        fd = _open_inside(base, rel)
    except Skipped as e:
        _note(notes, path, str(e))
        return
    if fd is None:
        return
    bad: dict[str, int] = {}
    total = 0
    with os.fdopen(fd, "rb") as f:
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            total += len(line)
            if total > cap:
                bad[f"file past {cap // (1024 * 1024)} MiB: rest not read"] = 1
                break
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # drop the rest of the long line
                    line = f.readline(MAX_LINE_BYTES + 1)
                    total += len(line)
                bad["line too long"] = bad.get("line too long", 0) + 1
                continue
            if not line.strip():
                continue
            try:
                obj = parse_json(line.strip())
            except Skipped as e:
                why = str(e).split(":")[0]
                bad[why] = bad.get(why, 0) + 1
                continue
            if not isinstance(obj, dict):
                bad["not a JSON object"] = bad.get("not a JSON object", 0) + 1
                continue
            yield obj
    if bad:
        _note(notes, path, "lines skipped: " + ", ".join(f"{n} {why}" for why, n in bad.items()))


def write_json(path: Path, data: Any) -> None:
    """Write atomically so a reader never sees half a file: a temp file made with exclusive
    create and no-follow (a planted symlink is never written through), then renamed over
    ``path`` (rename replaces a symlink named ``path``, it does not follow it)."""
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> None:
    """``write_json``'s safe temp-then-rename for any text file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp opens with a random name and O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW (CPython 3.11
    # Lib/tempfile.py, _text_openflags / _bin_openflags; tests/report/test_hostile.py checks it)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path, *, root: Path | None = None, notes: list[str] | None = None) -> Any | None:
    """Parsed JSON, or None when the file is absent, unreadable, not a regular file inside
    ``root`` (default: its own directory), a symlink, over MAX_JSON_BYTES or too deep; with
    ``notes``, a line there says why a file that exists was skipped."""
    path = Path(path)
    try:
        raw = read_bytes(path, root=root)
        return None if raw is None else parse_json(raw)
    except Skipped as e:
        _note(notes, path, str(e))
        return None


# -- files with their contract (kit/contracts/results.py) ----------------------------------------
def write_file(path: Path, contract: ResultsFile, data: dict[str, Any]) -> None:
    """``data`` written atomically (``write_json``) with its ``schema_version`` first; a
    ``ContractError`` (nothing written) when it is not of the contract's shape."""
    write_json(path, contract.stamp(data))


def append_record(path: Path, contract: ResultsFile, record: dict[str, Any]) -> None:
    """One record with its ``schema_version`` appended to a JSONL file (``append_jsonl``)."""
    append_jsonl(path, contract.stamp(record))


def read_file(path: Path, contract: ResultsFile, *, root: Path | None = None, notes: list[str] | None = None,
              label: str = "fields") -> dict[str, Any] | None:
    """A results file as its contract reads it (``ResultsFile.read``: a file from before versions
    upgraded, wrong-typed fields cleaned and noted), read as ``read_json`` reads (regular file
    inside ``root``, no symlink, capped); None when absent or unusable (noted)."""
    raw = read_json(path, root=root, notes=notes)
    return None if raw is None else contract.read(raw, str(path), notes, label=label)


def read_records(path: Path, contract: ResultsFile, *, root: Path | None = None,
                 notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The records of a JSONL results file as its contract reads them (``read_jsonl``'s skipped
    lines noted as there); records that cannot be placed are dropped, one note per reason."""
    path = Path(path)
    out: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    bad: list[str] = []
    said: set[str] = set()
    for raw in read_jsonl(path, root=root, notes=notes):
        why: list[str] = []
        rec = contract.read(raw, str(path), why, bad=bad)
        if rec is None:  # "<path>: skipped (backend is not a string or None)"
            dropped[why.pop().split("skipped (", 1)[-1].rstrip(")").replace(" is not ", " not ")] += 1
        else:
            out.append(rec)
        for line in why:  # a version note: once per file, not per record
            if line not in said:
                said.add(line)
                _note_line(notes, line)
    for why, n in dropped.items():
        _note_line(notes, f"{path}: {n} records skipped ({why})")
    if bad:
        _note_line(notes, f"{path}: wrong-typed fields ignored in records: {', '.join(sorted(set(bad))[:8])}")
    return out


def _note_line(notes: list[str] | None, line: str) -> None:
    if notes is not None:
        notes.append(line)


def endpoints_from_meta(meta: dict) -> dict[str, dict]:
    """Endpoint name -> its description in meta.json (a list of ``Endpoint.to_dict()``, or a
    name-keyed object in older runs), in today's words (``harness.endpoint.saved_endpoint``)."""
    eps = meta.get("endpoints") or {}
    if isinstance(eps, list):
        return {e["name"]: saved_endpoint(e) for e in eps if isinstance(e, dict) and isinstance(e.get("name"), str)}
    if not isinstance(eps, dict):
        return {}
    return {k: saved_endpoint({"name": k} | v) for k, v in eps.items() if isinstance(v, dict)}


def load_bench(results_dir: Path, *, notes: list[str] | None = None) -> dict[str, list[dict]]:
    """Endpoint name -> its levels from bench/<name>/summary.json (unusable levels skipped).
    A ``bench`` or ``bench/<name>`` that is a symlink is not followed (noted in ``notes``)."""
    out: dict[str, list[dict]] = {}
    root = Path(results_dir)
    bench = root / "bench"
    if bench.is_symlink():
        _note(notes, bench, "a symbolic link: not followed")
        return out
    if not bench.is_dir():
        return out
    with os.scandir(bench) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_symlink():
            _note(notes, Path(entry.path), "a symbolic link: not followed")
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        # a level whose load or throughput is not a number is dropped (the contract's Required
        # fields), other wrong-typed fields emptied; both are noted
        data = read_file(Path(entry.path) / "summary.json", BENCH_SUMMARY, root=root, notes=notes,
                         label="level fields")
        if data is not None:
            out[entry.name] = data["levels"]
    return out
