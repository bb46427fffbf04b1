"""``python -m harness.accuracy``: the same items on every backend, paired statistics.

    python -m harness.accuracy --endpoint a=http://127.0.0.1:8000/v1 --endpoint b=http://127.0.0.1:8001/v1 \\
        --items my_items.jsonl --out results/acc
    python -m harness.accuracy --endpoint a=URL --endpoint b=URL --tasks gsm8k,ifeval --limit 200 --out DIR

Writes DIR/items.jsonl (one line per item and backend, appended as answers arrive),
DIR/accuracy.json (per backend accuracy with a 95% Wilson interval; per pair the paired table,
difference with a 95% interval, exact McNemar p-value and smallest detectable difference) and
DIR/run.json (settings, methods, per-backend status, tasks a backend could not run and why).
Exit 0 when every backend finished every item, 1 when one is incomplete or a result could not be
written (a full disk: one line naming the file; what was recorded is kept), 2 on bad input.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from harness.accuracy import lmeval
from harness.accuracy.client import Settings, Target, openai_ask
from harness.accuracy.gateway import openai_gateway
from harness.accuracy.items import ITEMS_TASK, ItemsError, load_items
from harness.accuracy.runner import ITEMS_FILE, RecordLost, _Writer, finished, run_target
from harness.accuracy.stats import METHODS
from harness.accuracy.summary import summarize
from harness.results import Skipped, appendable_problem, parse_json, read_bytes, writable_problem, write_file
from kit.contracts import shape
from kit.contracts.results import ACCURACY, ACCURACY_RUN, BOS_NOT_CORRECTED
from kit.cli import OneLineParser, one_line_errors
from kit.errors import UsageError


def _nonempty_path(text: str) -> Path:
    if not text.strip():  # Path("") is ".": the current directory, silently
        raise argparse.ArgumentTypeError(f"{text!r}: give a path")
    return Path(text)


def _out_dir(text: str) -> Path:
    if not text.strip():  # Path("") is ".": the run would write into the current directory
        raise argparse.ArgumentTypeError(f"{text!r}: give a directory (an empty path would write "
                                         "into the current one)")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    first, _, rest = __doc__.partition("\n\n")
    p = OneLineParser(prog="python -m harness.accuracy", description=first.replace("``", ""),
                      epilog=rest + "Methods and files: docs/accuracy.md",
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", action="append", default=[], metavar="NAME=URL",
                   help="an OpenAI-compatible server (repeatable; at least one)")
    p.add_argument("--model", action="append", default=[], metavar="[NAME=]MODEL_ID",
                   help="model id (default: first of GET /v1/models)")
    add_options(p)
    p.add_argument("--out", type=_out_dir, required=True, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out: ask only what is missing")
    return p


def add_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Options shared with harness.run's accuracy stage (there prefixed ``accuracy-``)."""
    p.add_argument(f"--{prefix}items", type=_nonempty_path, metavar="FILE.jsonl",
                   help='your own items, {"id","question","answer"} per line, exact match on the final number or letter')
    p.add_argument(f"--{prefix}tasks", default="", metavar="T1,T2",
                   help="lm-evaluation-harness tasks, e.g. gsm8k,ifeval,arc_challenge,mmlu (needs requirements-accuracy.txt)")
    p.add_argument(f"--{prefix}limit", type=int, default=None, metavar="N", help="first N items per task")
    p.add_argument(f"--{prefix}seed", type=int, default=1234, help="request seed (default 1234)")
    p.add_argument(f"--{prefix}max-tokens", type=int, default=1024, help="max tokens per answer (default 1024)")
    p.add_argument(f"--{prefix}concurrency", type=int, default=4, help="requests in flight per backend (default 4)")
    p.add_argument(f"--{prefix}request-timeout", type=float, default=300.0, help="seconds per request (default 300)")
    p.add_argument(f"--{prefix}retries", type=int, default=3,
                   help="retries of a request the server refused or failed (default 3); then the backend stops")
    p.add_argument(f"--{prefix}tokenizer", default=None, metavar="ID_OR_DIR",
                   help="Hugging Face tokenizer (id or local directory) for log-likelihood tasks "
                        "(default: the server's /tokenize if served, else the model id)")
    p.add_argument(f"--{prefix}filter", default=None, metavar="NAME",
                   help="lm-eval filter to score by where a task has it, e.g. flexible-extract "
                        "(default: each task's first, e.g. strict-match for gsm8k)")
    p.add_argument(f"--{prefix}task-path", type=_nonempty_path, action="append", default=[], metavar="DIR",
                   help="extra lm-eval task YAML directory (repeatable)")


def check_options(a: argparse.Namespace, prefix: str = "") -> dict[str, Any]:
    """Validated inputs: {"items", "tasks", "settings", "limit", "concurrency", "task_paths"}.
    Raises UsageError with one line (the command door names the command)."""
    g = lambda name: getattr(a, (prefix + name).replace("-", "_"))  # noqa: E731
    opt = lambda name: f"--{prefix}{name}"  # noqa: E731
    limit = g("limit")
    if limit is not None and limit < 1:
        raise UsageError(f"{opt('limit')} {limit}: must be >= 1")
    if g("concurrency") < 1:
        raise UsageError(f"{opt('concurrency')} {g('concurrency')}: must be >= 1")
    if g("max_tokens") < 1:
        raise UsageError(f"{opt('max-tokens')} {g('max_tokens')}: must be >= 1")
    if not (math.isfinite(g("request_timeout")) and g("request_timeout") > 0):  # argparse's float takes inf
        raise UsageError(f"{opt('request-timeout')} {g('request_timeout')}: must be a finite number > 0")
    if g("retries") < 0:
        raise UsageError(f"{opt('retries')} {g('retries')}: must be >= 0")
    tasks = [t.strip() for t in g("tasks").split(",") if t.strip()]
    if not tasks and g("items") is None:
        raise UsageError(f"nothing to ask: give {opt('items')} FILE.jsonl and/or {opt('tasks')} T1,T2")
    if len(set(tasks)) != len(tasks):
        raise UsageError(f"{opt('tasks')} names a task twice")
    if ITEMS_TASK in tasks:
        raise UsageError(f"{opt('tasks')} {ITEMS_TASK!r} is reserved for {opt('items')}")
    items = None
    try:
        if g("items") is not None:
            items = load_items(g("items"), option=opt("items"))
        if tasks:
            lmeval.check_tasks(tasks, g("task_path"))
    except (ItemsError, lmeval.TaskError) as e:
        raise UsageError(str(e)) from None
    return {"items": items[:limit] if (items and limit) else items, "tasks": tasks, "limit": limit,
            "settings": Settings(seed=g("seed"), max_tokens=g("max_tokens"), timeout=g("request_timeout"),
                                 retries=g("retries")),
            "concurrency": g("concurrency"), "task_paths": list(g("task_path")),
            "tokenizer": g("tokenizer"), "filter": g("filter")}


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any]]:
    a = build_parser().parse_args(argv)
    from harness.discovery import DiscoveryError, check_endpoint_names, parse_endpoint_arg

    if not a.endpoint:
        raise UsageError("no backend: give --endpoint NAME=URL (repeatable)")
    try:
        names = [parse_endpoint_arg(e)[0] for e in a.endpoint]
        check_endpoint_names(a.endpoint, a.model)  # --model NAME=ID names an --endpoint
    except DiscoveryError as e:
        raise UsageError(str(e)) from None
    if len(set(names)) != len(names):
        raise UsageError("an --endpoint NAME is given twice")
    opts = check_options(a)
    check_out_dir(a.out, "--out")
    if os.path.lexists(a.out / ITEMS_FILE) and not a.resume:
        raise UsageError(f"{a.out / ITEMS_FILE} exists: pass --resume to continue "
                         "that run, or another --out")
    return a, opts


def check_out_dir(out: Path, flag: str) -> None:
    """Before anything is asked: ``out`` is a directory that can be written, items.jsonl is not
    a symlink or special file (never written through), and an earlier run.json is whole.
    Raises UsageError with one line."""
    problem = writable_problem(out, directory=True) or appendable_problem(out / ITEMS_FILE) \
        or writable_problem(out / "accuracy.json", directory=False) or writable_problem(out / "run.json", directory=False)
    if problem:
        raise UsageError(f"{flag} {out}: {problem}")
    previous_run(out)


# Fields of a backend in run.json that are text (harness.accuracy writes them; a resumed run copies
# them for backends it does not ask again, and the table and the report print them).
def previous_run(out: Path) -> dict[str, Any]:
    """run.json of an earlier run in ``out`` ({} when there is none), read as every results file
    is (harness.results: no symlink followed, size and nesting capped) and checked for the
    shape this module writes. A damaged one is a UsageError naming it, before anything is asked
    again (it used to crash the run after every item had been asked)."""
    path = out / "run.json"
    try:
        data = read_bytes(path, root=out)
        prev = {} if data is None else parse_json(data)
    except Skipped as e:
        raise UsageError(f"{path}: {e}; move it away or use another --out") from None
    why = _run_json_problem(prev)
    if why:
        raise UsageError(f"{path}: {why}, not a run.json harness.accuracy wrote; "
                         "move it away or use another --out")
    return prev


def _run_json_problem(prev: Any) -> str | None:
    """The first place ``prev`` is not of run.json's contract (kit/contracts/results.py
    ACCURACY_RUN, which this module writes); None when it is."""
    found = shape.problems(ACCURACY_RUN.shape, prev)
    return found[0] if found else None


# --------------------------------------------------------------------------- the run
def run_accuracy(targets: list[Target], opts: dict[str, Any], out_dir: Path, *,
                 echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Ask every target the selected items (and lm-eval tasks); write items.jsonl, accuracy.json
    and run.json in ``out_dir``. Returns run.json's content."""
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = _Writer(out_dir / ITEMS_FILE)
    settings: Settings = opts["settings"]
    status: dict[str, list[str]] = {t.name: [] for t in targets}
    run: dict[str, Any] = {
        "settings": {**settings.to_dict(), "limit": opts["limit"], "concurrency": opts["concurrency"]},
        "methods": METHODS,
        "backends": {t.name: {"model": t.model_id, "protocol": t.protocol, "label": t.label} for t in targets},
        "tasks": {}, "skipped": []}
    keys: list[tuple[str, str, str]] = []
    items = opts["items"]
    if items:
        from harness.accuracy.items import messages, prompt_hash

        keys += [(it.task, it.id, prompt_hash(messages(it))) for it in items]
        run["tasks"][ITEMS_TASK] = {"items": len(items), "scoring": "exact match on the final number or letter"}
        done = finished(out_dir)
        threads = []
        stop = threading.Event()
        lost: list[RecordLost] = []  # an answer that could not be written stops every backend
        for t in targets:
            def work(t: Target = t) -> None:
                try:
                    why = run_target(t, items, writer, set(done.get(t.name, {})),
                                     concurrency=opts["concurrency"], echo=echo, stop=stop)
                except RecordLost as e:
                    lost.append(e)
                    stop.set()
                    return
                if why:
                    status[t.name].append(f"{ITEMS_TASK}: {why}")
            threads.append(threading.Thread(target=work, name=f"accuracy-{t.name}", daemon=True))
        for th in threads:
            th.start()
        try:
            for th in threads:
                while th.is_alive():  # a timed join, so Ctrl-C reaches this thread at once
                    th.join(0.2)
        except KeyboardInterrupt:
            stop.set()  # nothing more is sent; answers in flight are still recorded
            for th in threads:
                th.join(opts["settings"].timeout)
            raise
        if lost:
            raise lost[0]
    with contextlib.ExitStack() as gateways:
        if opts["tasks"]:  # lm-eval speaks OpenAI only: a local gateway in front of the others
            via = [_for_lm_eval(t, run, gateways) for t in targets]
        for task in opts["tasks"]:
            _task(task, via, writer, out_dir, opts, run, status, keys, echo)
    for t in targets:  # optional fields a server refused (then sent without)
        if getattr(t.ask, "dropped", None):
            run["backends"][t.name]["not_sent"] = sorted(t.ask.dropped)
    results = finished(out_dir)
    names = [t.name for t in targets] + _earlier(out_dir, run, results, status, {t.name for t in targets})
    for name, old in lmeval.uncorrected(out_dir).items():  # answers kept from before the BOS-offset fix
        if name in run["backends"] and old.intersection(keys):
            run["backends"][name]["bos_offset"] = BOS_NOT_CORRECTED
    acc = summarize(names, keys, results)
    for name, b in acc["backends"].items():
        reasons = status[name] + [f"{s['task']}: could not run: {s['reason']}" for s in run["skipped"]
                                  if s["backend"] == name]
        if not b["complete"] and not reasons:
            reasons = [f"{len(keys) - b['n']} of {len(keys)} items have no answer"]
        b["complete"] = b["complete"] and not reasons  # a task it could not run leaves it incomplete
        run["backends"][name]["status"] = "complete" if b["complete"] else "incomplete: " + "; ".join(reasons)
    leaves = list(dict.fromkeys(k[0] for k in keys))
    if len(leaves) > 1:  # accuracy.json pools every task; the same numbers per task here
        run["by_task"] = {leaf: summarize(names, [k for k in keys if k[0] == leaf], results)
                          for leaf in leaves}
    for name, contract, data in (("accuracy.json", ACCURACY, acc), ("run.json", ACCURACY_RUN, run)):
        try:
            write_file(out_dir / name, contract, data)
        except OSError as e:  # named: the error itself may name only the temporary file
            raise OSError(e.errno, e.strerror or str(e), str(out_dir / name)) from None
    for line in format_table(acc, run):
        echo(line)
    return run


def _for_lm_eval(t: Target, run: dict[str, Any], gateways: contextlib.ExitStack) -> Target:
    """The target lm-eval talks to: itself, or a local gateway when it is not OpenAI-compatible."""
    if t.base_url:
        return t
    run["backends"][t.name]["lm_eval_via"] = f"local gateway: {t.protocol} is not OpenAI-compatible"
    return gateways.enter_context(openai_gateway(t))


def _earlier(out_dir: Path, run: dict[str, Any], results: dict, status: dict[str, list[str]],
             now: set[str]) -> list[str]:
    """Backends a resumed directory already has answers from but this run did not ask (e.g. the
    bf16 deployment, measured before the stack was redeployed with int4): compared on their
    recorded answers, with what the earlier run.json said about them."""
    try:  # checked before anything was asked (check_out_dir); a caller that did not: read as none
        prev = previous_run(out_dir)
    except UsageError:
        prev = {}
    names = [n for n in dict.fromkeys([*prev.get("backends", {}), *results]) if n not in now]
    for n in names:
        run["backends"][n] = {k: v for k, v in prev.get("backends", {}).get(n, {}).items() if k != "status"}
        run["backends"][n]["asked"] = "in an earlier run"
        run["skipped"] += [x for x in prev.get("skipped", []) if x.get("backend") == n]
        status[n] = []
    return names


def _task(task: str, targets: list[Target], writer: _Writer, out_dir: Path, opts: dict[str, Any],
          run: dict[str, Any], status: dict[str, list[str]], keys: list, echo: Callable[[str], None]) -> None:
    res = lmeval.run_task(task, targets, writer, out_dir, opts, echo=echo)
    keys += res.keys
    run["tasks"][task] = res.info
    run["skipped"] += res.skipped
    for name, via in res.via.items():
        run["backends"][name]["lm_eval_via"] = via
    for name, why in res.incomplete.items():
        status[name].append(f"{task}: {why}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def format_table(acc: dict, run: dict) -> list[str]:
    # A deployed backend's label carries its model id and scheme (g6@bf16 · google/gemma-4-E2B-it
    # (bf16), kit/variants.py); an --endpoint server is shown by its NAME.
    shown = {name: label if " · " in (label := str(run["backends"].get(name, {}).get("label") or "")) else name
             for name in acc["backends"]}
    w = max([12, *map(len, shown.values())])
    out = [f"{'backend':<{w}} {'n':>6} {'accuracy':>9}  95% CI          status"]
    for name, b in acc["backends"].items():
        lo, hi = b["ci95"]
        out.append(f"{shown[name]:<{w}} {b['n']:>6} {_pct(b['accuracy']):>8}%  [{_pct(lo)}, {_pct(hi)}]"
                   f"  {run['backends'][name].get('status', '')[:120]}")
    for p in acc["pairs"]:
        lo, hi = p["ci95"]
        mdd = p["min_detectable_diff"]
        out.append(f"{p['a']} - {p['b']}: n={p['n']} both={p['both']} a_only={p['a_only']} "
                   f"b_only={p['b_only']} neither={p['neither']} diff={_pct(p['diff'])} pts "
                   f"[{_pct(lo)}, {_pct(hi)}] McNemar p={p['p_mcnemar']:.3g} "
                   f"detectable >= {_pct(mdd)} pts")
    for s in run["skipped"]:
        out.append(f"skipped    {s['backend']}: {s['task']}: {s['reason']}")
    return out


@one_line_errors("harness.accuracy")
def main(argv: list[str] | None = None, *, echo: Callable[[str], None] = print) -> int:
    a, opts = parse_args(argv)  # bad input: UsageError, one line and exit 2 at the door
    from harness.discovery import DiscoveryError, from_endpoint_args

    try:
        eps = from_endpoint_args(a.endpoint, a.model)
    except DiscoveryError as e:
        print(f"harness.accuracy: {e}", file=sys.stderr)
        return 1
    s: Settings = opts["settings"]
    targets = [Target(e.name, e.model_id, "openai", openai_ask(e.base_url, e.model_id, s, e.auth), e.label,
                      base_url=e.base_url, auth=e.auth) for e in eps]
    try:
        run = run_accuracy(targets, opts, a.out, echo=echo)
    except KeyboardInterrupt:
        echo(f"\ninterrupted: the answers so far are in {a.out / ITEMS_FILE}; --resume continues")
        return 130
    except OSError as e:  # a full disk, a file size limit, a directory gone: one line, what is kept
        where = e.filename or a.out
        print(f"harness.accuracy: cannot write {where}: {e.strerror or e}; nothing more was asked; the answers "
              f"recorded before it are in {a.out / ITEMS_FILE} and --resume asks the rest once it can be written",
              file=sys.stderr)
        return 1
    return 0 if all(b["status"] == "complete" for b in run["backends"].values()) else 1
