"""apt in the image components and the user data waits for the locks a fresh Ubuntu boot's
apt-daily/unattended-upgrades hold (review R2).

Facts from apt's source (Debian/apt at 3.1.12, 6b1281242): ``DPkg::Lock::Timeout`` (added in
1.9.11, commit 93e156579 "apt(8): Wait for frontend and cache lock") is read only by
``debSystem::Lock`` (apt-pkg/deb/debsystem.cc, GetLockMaybeWait: dpkg's lock-frontend and lock).
``apt-get update`` locks ``Dir::State::Lists`` through ``pkgAcquire::GetLock`` (apt-pkg/update.cc
ListUpdate -> apt-pkg/acquire.cc), which calls ``::GetLock`` once (apt-pkg/contrib/fileutl.cc:
``fcntl(FD, F_SETLK, ...)``, non-blocking) and fails with "Could not get lock ... It is held by
process N". The fake ``apt-get`` below behaves that way: it takes every lock with a non-blocking
POSIX record lock and exits 100 when one is held.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.stacks.conftest import SYSTEMD_PATH
from tests.stacks.test_neuron_install import PARAM_REF

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "userdata" / "lib.sh"
COMPONENTS = ["python-uv.yaml", "neuron-engine.yaml", "vllm-sm75-build.yaml"]

FAKE_APT_GET = f'''#!{sys.executable}
import fcntl, os, sys, time
for path in os.environ["FAKE_APT_LOCKS"].split():
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(f"E: Could not get lock {{path}}. It is held by process 1 (unattended-upgr)", file=sys.stderr)
        sys.exit(100)
with open(os.environ["FAKE_APT_LOG"], "a") as log:
    log.write(f"{{time.time()}} {{' '.join(sys.argv[1:])}}\\n")
'''

HOLDER = '''
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
print(time.time(), flush=True)
'''


def function_text(script: str) -> str:
    """The kit_apt_get definition in a script, dedented: from its line to the closing brace."""
    lines = script.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.lstrip().startswith("kit_apt_get() {")]
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    end = lines.index(f"{indent}}}", start)
    return textwrap.dedent("\n".join(lines[start:end + 1]))


def apt_step(component: str) -> str:
    """The ExecuteBash block of a component that runs apt, cut after its last kit_apt_get call."""
    doc = yaml.safe_load((ROOT / "ami" / "components" / component).read_text())
    (script,) = ["\n".join(s["inputs"]["commands"]) for p in doc["phases"] for s in p["steps"]
                 if s["action"] == "ExecuteBash" and "kit_apt_get update" in "\n".join(s["inputs"]["commands"])]
    lines = script.splitlines()
    last = max(i for i, line in enumerate(lines) if line.lstrip().startswith("kit_apt_get ")
               and "() {" not in line)
    while lines[last].rstrip().endswith("\\"):
        last += 1
    text = "\n".join(lines[:last + 1])
    return PARAM_REF.sub(lambda m: {"NeuronApt": "aws-neuronx-runtime-lib=2.29.* aws-neuronx-collectives=2.29.*",
                                    "CudaHome": "/usr/local/cuda"}.get(m.group(1), "x"), text)


def test_every_component_carries_the_user_datas_function_verbatim():
    reference = function_text(LIB.read_text())
    for component in COMPONENTS:
        step = apt_step(component)
        assert function_text(step) == reference, component
        outside = textwrap.dedent(step).replace(reference, "")
        assert not [line for line in outside.splitlines() if line.strip().startswith("apt-get ")], component


@pytest.fixture
def apt_env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)
    locks = [tmp_path / name for name in ("lists.lock", "archives.lock", "lock-frontend")]
    for lock in locks:
        lock.write_text("")
    env = {"PATH": f"{bindir}:{SYSTEMD_PATH}", "LANG": "C.UTF-8", "FAKE_APT_LOG": str(tmp_path / "apt.log"),
           "FAKE_APT_LOCKS": " ".join(map(str, locks)), "KIT_APT_LOCKS": " ".join(map(str, locks)),
           "KIT_APT_POLL_S": "1"}
    return env, locks, tmp_path / "apt.log"


def run_under_held_lock(script: str, env: dict, lock: Path, hold_s: float):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(hold_s)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
        released = float(holder.stdout.readline())
    finally:
        holder.wait(timeout=30)
    return r, released


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_components_apt_step_waits_for_the_lists_lock_apt_does_not_wait_for(apt_env, component):
    env, locks, log = apt_env
    r, released = run_under_held_lock(apt_step(component), env, locks[0], 2.5)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert [c[1].split()[:3] for c in calls][0] == ["-o", "DPkg::Lock::Timeout=600", "update"]
    assert "install" in calls[1][1]
    assert float(calls[0][0]) >= released  # apt-get ran only once the holder let go
    assert "kit_apt_get: waiting for" in r.stderr


def test_the_user_datas_install_waits_too(apt_env):
    env, locks, log = apt_env
    script = f"source {LIB}\nkit_apt_get update -q"
    r, released = run_under_held_lock(script, env, locks[1], 2.5)
    assert r.returncode == 0, r.stdout + r.stderr
    (call,) = log.read_text().splitlines()
    assert float(call.split()[0]) >= released


def test_a_real_failure_is_reported_after_three_attempts(apt_env, tmp_path):
    env, locks, log = apt_env
    env = {**env, "FAKE_APT_LOCKS": str(tmp_path / "missing")}  # the fake fails: no such lock file
    r = subprocess.run(["bash", "-c", f"set -e\nsource {LIB}\nkit_apt_get install -y nosuchpkg"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.count("kit_apt_get: attempt") == 3
