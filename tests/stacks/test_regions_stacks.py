"""One region everywhere. The synthesized stacks deploy to the region the
harness prints; lint checks each template in its own region whatever the shell says; a backend
moved with ``-c <id>_region`` gets its own network (and image) stacks there."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from kit import regions
from tests.stacks.conftest import ROOT, synth

SHELL = {"AWS_DEFAULT_REGION": "us-east-2", "AWS_REGION": "us-east-2"}


def stack_regions(outdir) -> dict[str, str]:
    manifest = json.loads((outdir / "manifest.json").read_text())
    return {k: a["environment"].rsplit("/", 1)[-1] for k, a in manifest["artifacts"].items()
            if a.get("type") == "aws:cloudformation:stack"}


def test_lint_passes_with_another_region_in_the_shell(kit):
    """`make lint` under AWS_DEFAULT_REGION=us-east-2: g5g.2xlarge is not offered there (cfn-lint
    E3628), but the templates deploy to us-east-1 and are linted for it."""
    env = {**os.environ, **SHELL}
    r = subprocess.run([sys.executable, "-m", "kit.regions", "lint", str(kit.outdir)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # The check can fail: the same G5gStack linted for the shell's region is refused.
    plain = subprocess.run([str(ROOT / ".venv/bin/cfn-lint"), str(kit.outdir / "G5gStack.template.json")],
                           env=env, capture_output=True, text=True)
    assert plain.returncode != 0 and "E3628" in plain.stdout and "g5g.2xlarge" in plain.stdout


def test_the_region_harness_run_prints_is_where_the_stacks_deploy(kit, monkeypatch):
    for k, v in SHELL.items():
        monkeypatch.setenv(k, v)
    from harness.run.cli import offline_plan_text

    kit_regions = regions.resolve()
    assert set(stack_regions(kit.outdir).values()) == {kit_regions.region}
    assert offline_plan_text().splitlines()[0] == f"plan in {kit_regions.describe()}"
    assert kit_regions.shell_note(os.environ)  # and the shell's other region is called out


def test_a_backend_moved_to_another_region_brings_its_own_network(tmp_path):
    out = synth(tmp_path, backends="g6,g5g,inf2", g5g_region="us-west-2")
    where = stack_regions(out.outdir)
    assert where["G5gStack"] == where["NetworkStack-us-west-2"] == where["VllmSm75ImageStack-us-west-2"] == "us-west-2"
    assert where["G6Stack"] == where["NetworkStack"] == where["NeuronImageStack"] == "us-east-1"
    assert "VllmSm75ImageStack" not in where and "NetworkStack-us-east-1" not in where
    # G5gStack imports the VPC of the network stack in its own region, none from another.
    imports = json.dumps(out.templates["G5gStack"])
    assert "NetworkStack-us-west-2:" in imports and '"NetworkStack:' not in imports
    # Its outputs name the region discovery will look in.
    assert out.templates["G5gStack"]["Outputs"]["Region"]["Value"] == "us-west-2"
