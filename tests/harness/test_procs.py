"""harness.procs.stop: SIGTERM, then SIGKILL after the grace period, always reaped."""
from __future__ import annotations

import subprocess
import sys

from harness.procs import stop


def test_a_process_that_ends_on_sigterm_is_reaped():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stop(p, grace=5) == -15
    assert p.returncode == -15


def test_a_process_ignoring_sigterm_is_killed_after_the_grace():
    p = subprocess.Popen([sys.executable, "-c",
                          "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    assert stop(p, grace=0.5) == -9
    p.stdout.close()


def test_an_ended_process_is_left_as_it_ended():
    p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    p.wait()
    assert stop(p) == 3
