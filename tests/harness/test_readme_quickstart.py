"""The README's quickstart and teardown lines work as written in a fresh account.

The kit deploys to cdk.json's ``region`` and never the shell's (kit/regions.py), while the AWS CLI
uses its own default region: an ``aws`` command the README gives for a regional resource names the
kit's region, or the token secret lands where no stack reads it (preflight would then block on it)
and the teardown deletes nothing."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_aws_cli_line_in_the_readme_names_the_kits_region():
    from kit import regions

    # cdk.json leaves region to cdk.context.json and the default (tests/stacks/test_config.py)
    region = regions.resolve(context=json.loads((ROOT / "cdk.json").read_text())["context"]).region
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"(?m)(?:`|^)(aws [a-z0-9-]+ [^`\n#]+)", readme)
    assert any(c.startswith("aws secretsmanager create-secret") for c in commands)
    missing = [c.strip() for c in commands if f"--region {region}" not in c]
    assert missing == []
