"""Ask every target the same items in the same order; one JSONL line per item and backend,
appended (and fsynced) as each answer arrives, so a backend that dies mid-run keeps its finished
items and ``--resume`` asks only what is missing."""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

from harness.accuracy.client import BackendDown, ItemFailed, Target
from harness.accuracy.items import Item, messages, prompt_hash, score
from harness.results import append_record, read_records
from kit.contracts.results import ACCURACY_ITEMS

ITEMS_FILE = "items.jsonl"
Key = tuple[str, str, str]  # (task, item id, prompt hash)


def finished(out_dir: Path) -> dict[str, dict[Key, bool]]:
    """backend -> {(task, id, prompt_hash): correct} of every scored record (last one wins)."""
    out: dict[str, dict[Key, bool]] = {}
    for rec in read_records(out_dir / ITEMS_FILE, ACCURACY_ITEMS):
        if isinstance(rec.get("correct"), bool):
            out.setdefault(str(rec.get("backend")), {})[
                (str(rec.get("task")), str(rec.get("id")), str(rec.get("prompt_hash")))] = rec["correct"]
    return out


class RecordLost(OSError):
    """An answer that could not be appended to items.jsonl (a full disk, a file size limit): the
    run stops asking, since every later answer would be lost too. ``filename`` is the file."""


class _Writer:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def write(self, rec: dict) -> None:
        with self.lock:
            try:
                append_record(self.path, ACCURACY_ITEMS, rec)
            except OSError as e:
                raise RecordLost(e.errno, e.strerror or str(e), str(self.path)) from None


def run_target(target: Target, items: list[Item], writer: _Writer, done: set[Key], *,
               concurrency: int, echo: Callable[[str], None], stop: threading.Event | None = None) -> str | None:
    """Ask ``target`` every item not in ``done``, in order (at most ``concurrency`` at once).
    Returns None when every item got an answer, else why the backend stopped or what failed.
    ``stop`` set (Ctrl-C): nothing more is sent; the answers in flight are still recorded."""
    stop = stop or threading.Event()
    todo = deque(it for it in items if (it.task, it.id, prompt_hash(messages(it))) not in done)
    if not todo:
        return None
    total = len(todo)
    down: list[str] = []
    lost: RecordLost | None = None
    failed = 0
    answered = 0

    def one(it: Item) -> None:
        nonlocal failed, answered
        msgs = messages(it)
        base = {"backend": target.name, "model": target.model_id, "task": it.task, "id": it.id,
                "prompt_hash": prompt_hash(msgs)}
        t0 = time.monotonic()
        try:
            reply = target.ask(msgs)
        except ItemFailed as e:
            failed += 1
            writer.write({**base, "response": None, "extracted": None, "correct": None,
                          "answer": it.answer, "error": str(e)[:300],
                          "elapsed_s": round(time.monotonic() - t0, 3)})
            return
        got, ok = score(it, reply)
        answered += 1
        writer.write({**base, "response": reply, "extracted": got, "correct": ok, "answer": it.answer,
                      "elapsed_s": round(time.monotonic() - t0, 3)})

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"acc-{target.name}") as pool:
        running: set[Future] = set()
        while (todo and not down and not stop.is_set()) or running:
            while todo and not down and not stop.is_set() and len(running) < concurrency:
                running.add(pool.submit(one, todo.popleft()))
            finished_now, running = wait(running, return_when=FIRST_COMPLETED)
            for f in finished_now:
                exc = f.exception()
                if isinstance(exc, RecordLost):  # the harness's disk, not the backend: stop, say so
                    stop.set()
                    lost = lost or exc
                elif isinstance(exc, BackendDown):
                    down.append(str(exc))
                elif exc is not None:
                    down.append(f"{type(exc).__name__}: {exc}")
    if lost is not None:
        raise lost
    if down:
        echo(f"accuracy   {target.name}: stopped after {answered} answers: {down[0][:200]}")
        return f"stopped after {answered} of {total} items: {down[0][:300]}"
    if stop.is_set():
        return f"interrupted after {answered} of {total} items"
    if failed:
        return f"{failed} of {total} items failed (see error in {ITEMS_FILE}); --resume asks them again"
    return None
