"""Regions the kit touched outside its configuration, recorded on this machine.

``python -m harness images share`` can make things in a region no backend is configured for: a
copy of an image (``CopyImage``) placed where an attendee's backend runs, and that copy's
launch permissions and key grants. ``python -m harness images build`` makes an image stack (its
KMS key is retained) and AMIs with their snapshots in ``--region`` or where a backend was moved
with ``<id>_region``. ``python -m harness leftovers`` looks in the configured regions; it also
reads this record so what a share or a build made is not forgotten once the configuration
changes back.

    record_region(region, why)   remember a region (idempotent; ``why`` is kept for people)
    recorded_regions()           every region recorded, in first-recorded order

Where: ``$KIT_STATE_DIR/touched.json`` when ``KIT_STATE_DIR`` is set (tests, or a shared state
folder), else ``$XDG_STATE_HOME/aws-inference-kit/touched.json``, ``XDG_STATE_HOME`` defaulting
to ``~/.local/state`` (XDG Base Directory Specification 0.8: "$XDG_STATE_HOME defines the base
directory relative to which user-specific state files should be stored. If $XDG_STATE_HOME is
either not set or empty, a default equal to $HOME/.local/state should be used"). The state is per
user and machine: a share run on another machine is recorded there.

The record never stops a command: a missing file is an empty record; a file that cannot be read
or is not the record (broken JSON, wrong shape) is one line on stderr and read as empty (when
recording, it is moved aside to ``touched.json.corrupt`` first, so nothing in it is destroyed);
a record that cannot be written is one line naming the region to remember.

What a share makes is also findable by its tags (``share_tags``): ``project=aws-inference-kit``
(the tag every kit resource carries, stacks/wiring.py KIT_TAGS) and ``kit-share=<source AMI>
<source region>``, so leftovers can find copies by tag in a recorded region.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

STATE_DIR_VARIABLE = "KIT_STATE_DIR"
APP_DIR = "aws-inference-kit"
FILE_NAME = "touched.json"
MAX_BYTES = 1024 * 1024  # a few hundred bytes per region; anything larger is not this record

TAG_KEY, TAG_VALUE = "project", "aws-inference-kit"  # stacks.wiring KIT_TAGS
SHARE_TAG_KEY = "kit-share"


def state_dir(env: Any = None) -> Path:
    env = os.environ if env is None else env
    if env.get(STATE_DIR_VARIABLE):
        return Path(env[STATE_DIR_VARIABLE])
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / APP_DIR


def state_file(env: Any = None) -> Path:
    return state_dir(env) / FILE_NAME


def share_tags(source_ami: str, source_region: str) -> list[dict[str, str]]:
    """The tags of what a share makes (EC2 tag values: up to 256 characters)."""
    return [{"Key": TAG_KEY, "Value": TAG_VALUE},
            {"Key": SHARE_TAG_KEY, "Value": f"{source_ami} {source_region}"}]


def _load(path: Path, err: TextIO) -> tuple[list[dict[str, str]], bool]:
    """(entries, usable): usable is False when a file exists but is not the record."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):  # no record can exist there yet
        return [], True
    except OSError as e:
        print(f"touched regions: cannot read {path} ({e.strerror or type(e).__name__}); "
              "regions the kit copied images to are not known here", file=err)
        return [], False
    problem = None
    entries: Any = None
    if len(raw) > MAX_BYTES:
        problem = f"larger than {MAX_BYTES} bytes"
    else:
        try:
            entries = json.loads(raw.decode("utf-8")).get("regions")
        except (UnicodeDecodeError, ValueError, AttributeError, RecursionError):
            problem = "not JSON of the form {\"regions\": [...]}"
    if problem is None and not (isinstance(entries, list) and all(
            isinstance(e, dict) and isinstance(e.get("region"), str) for e in entries)):
        problem = "\"regions\" is not a list of {\"region\": ...} objects"
    if problem:
        print(f"touched regions: {path} is {problem}; read as empty", file=err)
        return [], False
    return entries, True


def recorded_regions(*, err: TextIO | None = None) -> list[str]:
    """Every recorded region, first-recorded first; [] when none or the record is unusable."""
    entries, _ = _load(state_file(), err or sys.stderr)
    return list(dict.fromkeys(e["region"] for e in entries))


def record_region(region: str, why: str, *, err: TextIO | None = None) -> None:
    """Remember ``region`` (once; a later ``why`` for the same region is not added)."""
    err = err or sys.stderr
    path = state_file()
    entries, usable = _load(path, err)
    if any(e["region"] == region for e in entries):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not usable and path.exists():
            aside = path.with_name(FILE_NAME + ".corrupt")
            os.replace(path, aside)
            print(f"touched regions: moved the unreadable record to {aside}", file=err)
        entries.append({"region": region, "why": why,
                        "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"regions": entries}, indent=2) + "\n")
        os.replace(tmp, path)  # atomic: a reader sees the old record or the new one
    except OSError as e:
        print(f"touched regions: cannot write {path} ({e.strerror or type(e).__name__}); remember "
              f"{region} ({why}): python -m harness leftovers --region {region}", file=err)
