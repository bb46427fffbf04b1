"""``harness.run --bench-from instance``: the load generator runs on the backend's own instance,
against the model server's loopback, so what it reports has no tunnel or internet path in it.

1. ``kit_zip()``: the kit's bench as one zip the instance's Python runs directly (``python
   kit.zip``): every ``harness`` and ``kit`` module ``harness.bench.cli`` imports (found from the source with
   ``ast``, so it follows refactors) plus a ``__main__.py``. Only pure Python of the kit; third-party
   packages come from the instance: Python >= 3.11 (the bench uses ``asyncio.timeout``; the
   engine venvs are ``kit/pins.py`` PYTHON_VERSION, 3.12) and ``aiohttp`` are required (the vLLM
   and Neuron engine venvs have it: vLLM depends on it, the Neuron engine serves with
   aiohttp.web); ``uvloop``,
   ``orjson``, ``rich`` and ``tokenizers`` are optional in the bench and used when present.
2. One command over the SSH connection the tunnel already holds (``run_remote``): the zip on
   stdin, the first Python on the instance that imports aiohttp (the engine venvs, then
   ``python3``), ``python kit.zip --base-url http://127.0.0.1:PORT/v1 ... --out DIR``, then
   ``tar`` of DIR on stdout. The bench's own stderr comes back as it runs.
3. The tar is unpacked into the run's ``bench/<name>/`` and every level, and bench.json, get
   ``bench_from: "instance"`` (plus the instance's CPU count), so the report can say where the
   bench ran; requests.jsonl and summary.json are otherwise what a local run writes.
"""
from __future__ import annotations

import ast
import io
import json
import shlex
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from harness.bench import store
from harness.bench.spec import BenchSpec
from harness.endpoint import Endpoint
from kit.errors import KitError

ROOT = Path(__file__).resolve().parents[2]  # the directory holding the harness package
ENTRY = "harness.bench.cli"
PACKAGES = ("harness", "kit")  # the kit's own packages the zip follows imports into (kit/: the core)
# Where the instance's Python with aiohttp is: the engine venvs the kit's images and boot
# scripts create (ami/components/vllm-cuda.yaml, userdata/engine-vllm-gpu.sh KIT_VENV,
# ami/components/neuron-engine.yaml), then the system's.
INSTANCE_PYTHONS = ("/opt/inference-kit/vllm/bin/python", "/opt/inference-kit/neuron/bin/python", "python3")
_MAIN = """import os, signal, sys
# started in the background by a non-interactive shell, which ignores SIGINT for it: restore
# Ctrl-C's KeyboardInterrupt, so the remote script's watcher can stop the bench cleanly
signal.signal(signal.SIGINT, signal.default_int_handler)
for name in filter(None, os.environ.get("KIT_BENCH_WITHOUT", "").split(",")):
    sys.modules[name] = None  # as if not installed (tests: the fallbacks without uvloop/orjson)
from harness.bench.cli import main
sys.exit(main())
"""


class RemoteBenchError(KitError, RuntimeError):
    """The bench on the instance could not run or its results did not come back."""

    exit_code = 1


# --------------------------------------------------------------------------- the zip
def _module_file(name: str) -> Path | None:
    p = ROOT.joinpath(*name.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def kit_modules(entry: str = ENTRY) -> list[Path]:
    """Every harness module ``entry`` can import (each import statement, at any depth), and
    the packages above them."""
    seen: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] in PACKAGES]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{up}.{base}" if base else up
                if base.split(".")[0] in PACKAGES:
                    todo += [base] + [f"{base}.{a.name}" for a in node.names]
    return sorted(seen.values())


def kit_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path in kit_modules():
            z.write(path, path.relative_to(ROOT).as_posix())
        z.writestr("__main__.py", _MAIN)
    return buf.getvalue()


# --------------------------------------------------------------------------- the command
def bench_argv(endpoint: Endpoint, *, remote_port: int, spec: BenchSpec) -> list[str]:
    """The ``python -m harness.bench`` arguments for the instance: its loopback, this run's spec
    (less what only means something here: a local tokenizer path, resuming a local directory)."""
    return ["--base-url", f"http://127.0.0.1:{remote_port}/v1", "--model", endpoint.model_id,
            "--name", endpoint.name, *replace(spec, tokenizer=None, resume=False, progress=False).argv()]


def remote_command(argv: list[str], zip_size: int, *, pythons: tuple[str, ...] = INSTANCE_PYTHONS,
                   env: dict[str, str] | None = None) -> str:
    """The shell command run on the instance: read the zip (``zip_size`` bytes) from stdin, find
    a Python >= 3.11 with aiohttp, run the bench in the background (its output to stderr) while a
    watcher waits for stdin's EOF, which comes when the caller closes the channel (done or
    Ctrl-C): then the bench gets SIGINT. Finally the results as a tar on stdout; the temporary
    directory is removed on every exit."""
    cands = " ".join(shlex.quote(p) for p in pythons)
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    bench = " ".join(shlex.quote(a) for a in argv)
    return (
        # fd 3 = the channel's stdin: a background job's own stdin is /dev/null (POSIX sh)
        'set -u; exec 3<&0; d=$(mktemp -d "${TMPDIR:-/tmp}/kit-bench.XXXXXX") || exit 90; '
        "trap 'rm -rf \"$d\"' EXIT; "
        f"head -c {int(zip_size)} > \"$d/kit.zip\" || exit 91; py=; "
        f"for c in {cands}; do if command -v \"$c\" >/dev/null 2>&1 && "
        "\"$c\" -c 'import sys, aiohttp; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 </dev/null; "
        "then py=$c; break; fi; done; "
        f"if [ -z \"$py\" ]; then echo 'no Python >= 3.11 with aiohttp on the instance (looked for: "
        f"{' '.join(pythons)})' >&2; "
        "exit 92; fi; "
        f"{envs} \"$py\" \"$d/kit.zip\" {bench} --out \"$d/out\" 1>&2 </dev/null 3<&- & pid=$!; "
        # the watcher reads with the shell's own `read` (no child that would outlive `kill $w`
        # and keep the session's stdin, which sshd may share with stdout, open)
        "( while read -r _ <&3; do :; done; kill -INT $pid ) >/dev/null 2>&1 & w=$!; exec 3<&-; "
        "wait $pid; rc=$?; kill $w 2>/dev/null; "
        "mkdir -p \"$d/out\"; "
        "\"$py\" -c 'import json,os,platform,sys; json.dump({\"python\": platform.python_version(), "
        "\"python_path\": sys.argv[1], \"cpus\": os.cpu_count()}, open(sys.argv[2], \"w\"))' "
        "\"$py\" \"$d/out/instance.json\" </dev/null; "
        "tar -C \"$d/out\" -cf - . || exit 93; exit $rc"
    )


# --------------------------------------------------------------------------- run and merge
def run_remote_bench(forwarder: Any, endpoint: Endpoint, out_dir: Path, *, remote_port: int,
                     spec: BenchSpec, echo: Callable[[str], None] = print,
                     pythons: tuple[str, ...] | None = None,
                     env: dict[str, str] | None = None, cancel: Any = None) -> list[dict]:
    """Run the bench on the instance behind ``forwarder`` and unpack its results into
    ``out_dir`` (which must not hold a bench yet). Returns the levels as in summary.json.
    ``cancel`` (a threading.Event) or Ctrl-C stops the bench on the instance."""
    out_dir = Path(out_dir)
    if (out_dir / store.SUMMARY).exists() or (out_dir / store.REQUESTS).exists():
        raise RemoteBenchError(f"{out_dir}: already holds a benchmark")
    tail: list[str] = []

    def on_stderr(data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                tail[:] = (tail + [line])[-5:]
                echo(f"bench      {endpoint.name} (instance): {line}")

    kit = kit_zip()
    cmd = remote_command(bench_argv(endpoint, remote_port=remote_port, spec=spec), len(kit),
                         pythons=pythons or INSTANCE_PYTHONS, env=env)
    status, tar_bytes = forwarder.run_remote(cmd, kit, on_stderr=on_stderr, keep_stdin_open=True, cancel=cancel)
    if not tar_bytes:
        raise RemoteBenchError(f"no results came back (exit status {status})"
                               + (f": {tail[-1]}" if tail else ""))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        tar.extractall(out_dir, filter="data")  # no absolute paths, no links out, no devices
    if not (out_dir / store.SUMMARY).exists():
        raise RemoteBenchError(f"the bench on the instance wrote no summary (exit status {status})"
                               + (f": {tail[-1]}" if tail else ""))
    return _mark_instance(out_dir, status)


def _mark_instance(out_dir: Path, status: int) -> list[dict]:
    inst = _read(out_dir / "instance.json") or {}
    (out_dir / "instance.json").unlink(missing_ok=True)
    where = {"bench_from": "instance", "instance_cpus": inst.get("cpus")}
    levels = [{**lv, **where} for lv in (store.levels_of(_read(out_dir / store.SUMMARY)) or [])
              if isinstance(lv, dict)]
    store.write_summary(out_dir, levels)
    config = _read(out_dir / store.CONFIG) or {}
    store.write_config(out_dir, {**config, **where, "instance_python": inst.get("python"),
                                 "instance_python_path": inst.get("python_path"),
                                 "remote_exit_status": status})
    return levels


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
