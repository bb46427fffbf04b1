"""Test-wide settings: no network, no credentials, no account (see README, Testing)."""
from __future__ import annotations

import os
import shutil
import signal

import pytest

for _k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
           "CDK_DEFAULT_ACCOUNT"):
    os.environ.pop(_k, None)
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REQUIRE_SYSTEM_DEPS = os.environ.get("KIT_REQUIRE_SYSTEM_DEPS") == "1"


def require_binary(path_or_name: str) -> str:
    """Path of a system binary a test needs. In CI (KIT_REQUIRE_SYSTEM_DEPS=1) a missing one
    fails the test, so a missing install step can never turn into a silent skip."""
    found = shutil.which(path_or_name) or (path_or_name if os.path.exists(path_or_name) else None)
    if found:
        return found
    msg = f"{path_or_name} not installed (make sysdeps installs it)"
    if REQUIRE_SYSTEM_DEPS:
        pytest.fail(msg)
    pytest.skip(msg)


def sigint_as_a_terminal_would() -> None:
    """``preexec_fn`` for a child that a test sends Ctrl-C (SIGINT). A process started as a
    background job of a non-interactive shell (``cmd &``, CI wrappers) inherits SIGINT *ignored*,
    and Python then installs no KeyboardInterrupt handler: the child would ignore the test's Ctrl-C
    (measured here: SigIgn 0x6 under ``setsid bash -c 'cmd' &``; harness.run then finished all 20
    runs with rc 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# `make check`, the fast tier, skips these (pyproject.toml's `slow` marker): files whose tests
# start real servers, subprocesses, sshd sessions or model loads, or synthesize every stack, taken
# from `pytest --durations` on this 2-core machine (each over ~1.5 s per test, or minutes in all).
# `make test` and CI run everything.
SLOW_PATHS = (
    "tests/demo/", "tests/calibration/", "tests/stacks/", "tests/package/test_build.py",
    "tests/package/test_stack.py", "tests/package/test_vllm_pin.py", "tests/accuracy/test_kit_engine.py",
    "tests/accuracy/test_cli.py", "tests/accuracy/test_lmeval.py", "tests/accuracy/test_run_stage.py",
    "tests/bench/test_locust.py", "tests/bench/test_refserver_runs.py", "tests/bench/test_hostile.py",
    "tests/harness/test_trial.py", "tests/harness/test_access.py", "tests/harness/test_tunnel_openssh.py",
    "tests/harness/test_tunnel_proc.py", "tests/harness/test_bench_remote.py", "tests/harness/test_run_hostile.py",
    "tests/harness/test_preflight_account.py", "tests/neuron/test_hostile.py", "tests/neuron/test_nxdi08.py",
    "tests/report/test_hostile.py", "tests/package/test_hostile_tensors.py", "tests/package/test_hostile_files.py",
    "tests/package/test_hostile_out.py", "tests/accuracy/test_deadline.py", "tests/report/test_scale.py",
    "tests/harness/test_url_credentials.py", "tests/neuron/test_port_check.py",
    "tests/neuron/test_sampling_api.py", "tests/accuracy/test_bos_offset.py", "tests/neuron/test_simulated.py",
)


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath) + "/"
    for item in items:
        if str(item.path).removeprefix(root).startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.slow)


def saved_levels(path) -> list:
    """The levels of a summary.json the kit wrote, which carries its contract's schema_version
    first (kit/contracts/results.py BENCH_SUMMARY)."""
    import json
    from pathlib import Path

    from kit.contracts.results import BENCH_SUMMARY

    data = json.loads(Path(path).read_text())
    assert isinstance(data, dict) and list(data)[:2] == ["schema_version", "levels"], str(data)[:200]
    assert data["schema_version"] == BENCH_SUMMARY.version
    return data["levels"]
