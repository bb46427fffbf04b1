"""Adding a backend is three rows (docs/adding-a-backend.md): its catalog row, its instance row and
its price row. With those three put in place in a child process (tests/kit/extra_rows.py, as
typing them into kit/catalog.py and harness/cost/price_snapshot.json would), and no test file
changed, every stack test parametrized over the EC2 backends collects the new one, and the
catalog's and the price snapshot's checks pass for it. Collection only: nothing is synthesized.

Before, tests/stacks/conftest.py's EC2_STACKS was a typed list: a new backend was collected by
none of the tests parametrized over it, silently."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from kit import subnets
from kit.catalog import BACKENDS

ROOT = Path(__file__).resolve().parents[2]

# A p3 backend (one NVIDIA V100): test data, in none of the kit's files, on a type no other test
# uses (tests/stacks/test_sizing.py takes g4dn.xlarge as "a type the catalog lacks").
NEW_ID, NEW_STACK, NEW_TYPE = "p3", "P3Stack", "p3.2xlarge"
ROWS = {
    "backends": [{"like": "g6", "id": NEW_ID, "stack_name": NEW_STACK, "label": "vLLM on EC2 p3 (V100)",
                  "instance_type": NEW_TYPE, "color": "#bcbd22", "subnet_blocks": subnets.free_blocks()[:4]}],
    "instances": [{"like": "g6.xlarge", "name": NEW_TYPE, "vcpus": 8, "accelerators": 1, "accel_memory_gib": 16,
                   "bandwidth_gb_s": 900, "source": "test row",
                   "chip": {"like": "NVIDIA T4G", "name": "NVIDIA V100", "source": "test row"}}],
    "prices": [{"service": "ec2", "instance_type": NEW_TYPE, "region": "us-east-1", "usd_per_hour": 0.5,
                "source": "test row, not a quoted price"}],
}
# Tests whose parameters happen to name every EC2 backend but are not a list of them, and why.
NOT_OVER_THE_BACKENDS = {
    "tests/stacks/test_catalog.py::test_instance_rules": "one instance-type rule per case, cited per backend",
    "tests/stacks/test_custom_resources.py::test_no_logical_id_of_the_custom_resource_parts_changed":
        "a record of each stack's logical ids before a change, not the catalog's list",
}


def child_pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "rows.json"
    spec.write_text(json.dumps(ROWS))
    env = {**os.environ, "KIT_EXTRA_ROWS": str(spec), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.kit.extra_rows", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def params_by_test(collected: str) -> dict[str, set[str]]:
    """Test function node id -> the words of its parameter ids ('g6-G6Stack' -> g6, G6Stack)."""
    out: dict[str, set[str]] = {}
    for line in collected.splitlines():
        m = re.fullmatch(r"(tests/\S+?::\S+?)(?:\[(.*)\])?", line.strip())
        if m and "::" in line:
            out.setdefault(m.group(1), set()).update(re.split(r"[-,\s]+", m.group(2) or ""))
    return out


def test_every_test_over_the_ec2_backends_collects_a_new_row(tmp_path):
    p = child_pytest(tmp_path, "--collect-only", "-q", "tests/stacks")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    tests = params_by_test(p.stdout)
    # the tests whose parameters name every EC2 backend the catalog has today, by id or stack
    ec2 = [b for b in BACKENDS.values() if b.service == "ec2"]
    over_ec2 = {t for t, words in tests.items() if all({b.id, b.stack_name} & words for b in ec2)
                and t not in NOT_OVER_THE_BACKENDS}
    missing = sorted(t for t in over_ec2 if not {NEW_ID, NEW_STACK} & tests[t])
    assert over_ec2 and missing == [], f"{len(missing)} of {len(over_ec2)} miss {NEW_ID}: {missing}"
    collected_new = [ln for ln in p.stdout.splitlines() if re.search(rf"[\[-]({NEW_ID}|{NEW_STACK})[\]-]", ln)]
    assert len(collected_new) >= len(over_ec2)


def test_the_catalog_and_snapshot_checks_pass_for_the_new_row(tmp_path):
    """Its default type is accepted by its own row (the instance row gives its architecture and GPU
    count), it has an instance row and a snapshot price."""
    p = child_pytest(tmp_path, "-q", "tests/stacks/test_catalog.py",
                     "tests/cost/test_tables.py::test_every_backend_has_its_instance_row_and_a_snapshot_price")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", p.stdout) and "failed" not in p.stdout
    listed = child_pytest(tmp_path, "--collect-only", "-q", "tests/stacks/test_catalog.py")
    assert f"test_every_default_instance_type_is_accepted_by_its_backend[{NEW_ID}]" in listed.stdout
