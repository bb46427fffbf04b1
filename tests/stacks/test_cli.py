"""`cdk synth` through the real CDK CLI: bad input is one line and a non-zero exit, no traceback."""
from __future__ import annotations

import os
import subprocess

from kit.catalog import BACKEND_IDS
from tests.conftest import require_binary
from tests.stacks.conftest import ROOT


def cdk_synth(tmp_path, *args: str) -> subprocess.CompletedProcess:
    npx = require_binary("npx")
    require_binary(str(ROOT / "node_modules/.bin/cdk"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_DEFAULT"))}
    env.update(CDK_DISABLE_CLI_TELEMETRY="true", AWS_EC2_METADATA_DISABLED="true",
               JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20")
    return subprocess.run([npx, "--no-install", "cdk", "synth", "-q", "-o", str(tmp_path / "out"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_unknown_backend_is_one_line_naming_it_and_the_valid_ids(tmp_path):
    r = cdk_synth(tmp_path, "-c", "backends=nope")
    assert r.returncode != 0
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("config error:")]
    assert len(lines) == 1, r.stdout + r.stderr
    assert "'nope'" in lines[0] and ", ".join(BACKEND_IDS) in lines[0]
    assert "Traceback" not in r.stdout + r.stderr
