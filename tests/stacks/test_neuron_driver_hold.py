"""The Neuron image installs the 2.28.1 driver (aws-neuronx-dkms 2.26.10.0, the Linux 6.18 fix) and
holds it with the runtime and the kernel it was built for, so no unattended upgrade moves the
instance to a kernel the driver does not build for; its validate step refuses an image whose driver
is the DLAMI's 2.26.5.0 or whose kernel is not held.

The component's PinNeuronRuntime step and the pin check of CheckPins run as written (with
ami/scripts/neuron-hold.sh, from the unpacked assets), with the parameters NeuronImageStack
synthesizes, against stand-ins for apt-get, apt-mark, dpkg-query and uname that keep a small dpkg
database in a file (name, status, version per line).
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from kit import pins
from tests.stacks.test_neuron_install import agent_env, render, stack_parameters, step_script

KERNEL = "6.14.0-1015-aws"
# What the 20260227 DLAMI could hold: its kernel, the AWS meta packages, an older kernel removed
# but not purged (rc: not installed), unrelated packages, and 2.28.0's driver.
DLAMI = {
    f"linux-image-{KERNEL}": ("ii", "6.14.0-1015.15~24.04.1"),
    f"linux-modules-{KERNEL}": ("ii", "6.14.0-1015.15~24.04.1"),
    f"linux-headers-{KERNEL}": ("ii", "6.14.0-1015.15~24.04.1"),
    "linux-aws": ("ii", "6.14.0.1015.15"),
    "linux-image-aws": ("ii", "6.14.0.1015.15"),
    "linux-headers-aws": ("ii", "6.14.0.1015.15"),
    "linux-image-6.8.0-1021-aws": ("rc", "6.8.0-1021.23"),
    "linux-libc-dev": ("ii", "6.8.0-100.100"),
    "aws-neuronx-dkms": ("ii", "2.26.5.0"),
    "aws-neuronx-runtime-lib": ("ii", "2.30.51.0-faa4b1ad6"),
}

FAKES = {
    "uname": f'print("{KERNEL}" if sys.argv[1:] == ["-r"] else "Linux")',
    "dpkg-query": '''
import fnmatch
db = load()
args = sys.argv[1:]
fmt = args[args.index("-f") + 1]
names = [a for a in args[args.index("-f") + 2:]]
found = False
for pattern in names:
    for name, (status, version) in sorted(db.items()):
        if fnmatch.fnmatchcase(name, pattern):
            found = True
            if fmt == "${Version}":
                sys.stdout.write(version)
            else:
                print(f"{status}  {name}")
sys.exit(0 if found else 1)
''',
    "apt-get": '''
log("apt-get " + " ".join(sys.argv[1:]))
if "install" in sys.argv:
    db = load()
    for spec in [a for a in sys.argv[1:] if not a.startswith("-") and a != "install"]:
        name, _, version = spec.partition("=")
        db[name] = ("ii", version.rstrip("*") or db.get(name, ("", "1"))[1])
    save(db)
''',
    "apt-mark": '''
held = STATE / "holds"
if sys.argv[1] == "hold":
    log("apt-mark " + " ".join(sys.argv[1:]))
    with held.open("a") as f:
        f.writelines(p + "\\n" for p in sys.argv[2:])
elif sys.argv[1] == "showhold":
    print("".join(sorted(set(held.read_text().splitlines(True)))) if held.exists() else "", end="")
''',
}
PRELUDE = '''import os, sys
from pathlib import Path
STATE = Path(os.environ["FAKE_STATE"])
def load():
    return {n: (s, v) for n, s, v in (line.split() for line in (STATE / "dpkg").read_text().splitlines())}
def save(db):
    (STATE / "dpkg").write_text("".join(f"{n} {s} {v}\\n" for n, (s, v) in db.items()))
def log(line):
    with (STATE / "log").open("a") as f:
        f.write(line + "\\n")
'''


@pytest.fixture
def host(tmp_path):
    """A stand-in build host: fake tools first on the agent's PATH, the DLAMI's dpkg database."""
    bindir, state = tmp_path / "bin", tmp_path / "state"
    bindir.mkdir()
    state.mkdir()
    for name, body in FAKES.items():
        (bindir / name).write_text(f"#!{sys.executable}\n{PRELUDE}{body}")
        (bindir / name).chmod(0o755)
    (state / "dpkg").write_text("".join(f"{n} {s} {v}\n" for n, (s, v) in DLAMI.items()))
    env = agent_env(FAKE_STATE=str(state), KIT_APT_LOCKS=str(tmp_path / "no-lock"))
    env["PATH"] = f"{bindir}:{env['PATH']}"
    return tmp_path, state, env


def pin_check() -> str:
    """CheckPins up to its apt pin and hold check, neuron-hold.sh --check (the rest needs the engine venv)."""
    lines = step_script("validate", "CheckPins").splitlines()
    end = next(i for i, line in enumerate(lines) if "neuron-hold.sh --check" in line)
    return "\n".join(lines[:end + 1])


def run(script: str, host, **params: str) -> subprocess.CompletedProcess:
    tmp_path, _, env = host
    body = render(script, {**stack_parameters(), **params}, tmp_path / "root")
    return subprocess.run(["/bin/bash", "-c", body], env=env, capture_output=True, text=True, timeout=60)


def test_the_pins_hold_the_2_28_1_driver_not_the_dlamis():
    assert pins.neuron_line("2.28").apt["aws-neuronx-dkms"] == "2.26.10.0"
    assert "aws-neuronx-dkms=2.26.10.0*" in pins.neuron_apt_specs("2.28").split()
    assert stack_parameters()["KernelHold"] == " ".join(pins.KERNEL_HOLD) == "linux-*aws*"


def test_the_image_installs_the_driver_with_the_kernels_headers_and_holds_driver_and_kernel(host):
    _, state, _ = host
    r = run(step_script("build", "PinNeuronRuntime"), host)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (state / "log").read_text().splitlines()
    (install,) = [line for line in log if line.startswith("apt-get") and " install " in line]
    assert f"linux-headers-{KERNEL}" in install.split() and "aws-neuronx-dkms=2.26.10.0*" in install.split()
    (hold,) = [line.split()[2:] for line in log if line.startswith("apt-mark hold")]
    assert set(hold) == {*pins.neuron_line("2.28").apt, f"linux-image-{KERNEL}", f"linux-modules-{KERNEL}",
                         f"linux-headers-{KERNEL}", "linux-aws", "linux-image-aws", "linux-headers-aws"}
    # The validate step's pin check passes on that host...
    r = run(pin_check(), host)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "aws-neuronx-dkms 2.26.10.0" in r.stdout


def test_a_kernel_the_dlami_already_holds_is_held_again_not_refused(host):
    """dpkg's abbreviated status of a held, installed package is "hi", not "ii"."""
    _, state, _ = host
    db = {line.split()[0]: line.split()[1:] for line in (state / "dpkg").read_text().splitlines()}
    db[f"linux-image-{KERNEL}"][0] = "hi"
    (state / "dpkg").write_text("".join(f"{n} {s} {v}\n" for n, (s, v) in db.items()))
    r = run(step_script("build", "PinNeuronRuntime"), host)
    assert r.returncode == 0, r.stdout + r.stderr
    (hold,) = [line.split()[2:] for line in (state / "log").read_text().splitlines() if line.startswith("apt-mark hold")]
    assert f"linux-image-{KERNEL}" in hold


def test_the_dlamis_driver_or_an_unheld_kernel_fails_validation_in_one_line(host):
    _, state, _ = host
    # The DLAMI as it comes (driver 2.26.5.0), everything held: the version check names the driver.
    (state / "holds").write_text("".join(f"{p}\n" for p in [*DLAMI, "aws-neuronx-collectives", "aws-neuronx-tools"]))
    db = (state / "dpkg").read_text() + "aws-neuronx-collectives ii 2.30.59.0\naws-neuronx-tools ii 2.28.23.0\n"
    (state / "dpkg").write_text(db.replace("aws-neuronx-runtime-lib ii 2.30.51.0-faa4b1ad6",
                                           "aws-neuronx-runtime-lib ii 2.30.51.0"))
    r = run(pin_check(), host)
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1] == "aws-neuronx-dkms is 2.26.5.0, want 2.26.10.0*"
    # The right driver but the kernel free to move: refused too.
    (state / "dpkg").write_text((state / "dpkg").read_text().replace("aws-neuronx-dkms ii 2.26.5.0",
                                                                     "aws-neuronx-dkms ii 2.26.10.0"))
    (state / "holds").write_text("".join(f"{p}\n" for p in pins.neuron_line("2.28").apt))
    r = run(pin_check(), host)
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1] == f"the kernel linux-image-{KERNEL} is not held"


def test_a_host_whose_running_kernel_is_not_a_package_stops_the_build_in_one_line(host):
    _, state, _ = host
    (state / "dpkg").write_text((state / "dpkg").read_text().replace(f"linux-image-{KERNEL} ii", f"linux-image-{KERNEL} rc"))
    r = run(step_script("build", "PinNeuronRuntime"), host)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == (
        f"neuron image build failed at PinNeuronRuntime: the running kernel's package linux-image-{KERNEL} "
        "is not installed, so the kernel cannot be held")
    assert "apt-mark hold" not in (state / "log").read_text()
