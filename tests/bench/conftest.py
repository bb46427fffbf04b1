"""The reference paced server (harness.calibration.refserver) as a fixture: one process per test
module on 127.0.0.1, reconfigured per test through POST /control, stopped when the module ends."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.calibration.refserver import RefServerProcess

REPO = Path(__file__).resolve().parents[2]

DEFAULTS = {"ttft_ms": 60.0, "itl_ms": 5.0, "tokens_per_chunk": 1, "usage": "vllm",
            "role_chunk": True, "output_tokens": 0, "fault": "none", "fault_every": 0,
            "drop_after": 4, "record": True}


class RefServer(RefServerProcess):
    def configure(self, **settings) -> None:
        super().configure(**{**DEFAULTS, **settings})

    def records(self) -> dict[str, dict]:  # by request id
        return {r["id"]: r for r in super().records()}

    def call(self, method: str, path: str, body=None):
        return super().call(method, path, body, timeout=10)


@pytest.fixture(scope="module")
def refserver():
    srv = RefServer(cwd=str(REPO))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ref(refserver):
    refserver.configure()
    return refserver
