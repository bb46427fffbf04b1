"""Every command of ``python -m harness`` (harness/__main__.py COMMANDS), given a bad option
value, exits non-zero with exactly one line on stderr that names the value, and never a
traceback: the command door (kit/cli.py) as a user meets it, one real process per command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.__main__ import COMMANDS

REPO = Path(__file__).resolve().parents[2]

# command -> (arguments with one bad value, words the one line must carry)
BAD = {
    "run": (["--runs", "x"], "--runs: invalid int value: 'x'"),
    "preflight": (["--backends", "h100"], "unknown backend 'h100'"),
    "plan": (["--context", "x"], "--context: invalid int value: 'x'"),
    "bench": (["--requests", "x"], "--requests: 'x'"),
    "accuracy": (["--concurrency", "x"], "--concurrency: invalid int value: 'x'"),
    "cost": (["--input-per-output", "many"], "got 'many'"),
    "report": (["/nonexistent/results"], "/nonexistent/results is not a directory"),
    "package": (["build", "--out", "o", "--scheme", "int9"], "invalid choice: 'int9'"),
    "images": (["list", "--poll", "x"], "--poll: invalid float value: 'x'"),
    "deploy": (["--cdk-json", "/nonexistent/cdk.json"], "/nonexistent/cdk.json: no such file"),
    "leftovers": (["--cdk-json", "/nonexistent/cdk.json"], "/nonexistent/cdk.json: no such file"),
}


def test_every_command_has_a_bad_value_here():
    assert set(BAD) == set(COMMANDS)  # a new command: add its bad value to BAD


def test_a_bad_option_value_is_one_line_never_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(REPO), AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    procs = {name: subprocess.Popen([sys.executable, "-m", "harness", name, *args], cwd=tmp_path, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (args, _) in BAD.items()}  # all at once: the imports overlap
    bad = []
    for name, p in procs.items():
        out, err = p.communicate(timeout=120)
        words = BAD[name][1]
        if p.returncode == 0 or len(err.splitlines()) != 1 or "Traceback" in err or words not in err:
            bad.append(f"{name}: exit {p.returncode}, stderr {err!r}")
    assert not bad, "\n".join(bad)
    assert not any(tmp_path.iterdir())  # nothing written for bad input
