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
