"""Preflight counts a backend's variant stacks (kit/variants.py): three g6.xlarge need 12 G vCPUs."""
from __future__ import annotations

import boto3

from harness import preflight
from tests.harness.test_preflight import _bootstrap, _quota, cdk_json, ready  # noqa: F401 - fixtures


def test_variants_count_against_the_vcpu_quota(aws, cdk_json, capsys, tmp_path):  # noqa: F811
    import json

    p = tmp_path / "variants-cdk.json"
    p.write_text(json.dumps({"app": "x", "context": {
        "region": "us-east-1", "backends": "g6",
        "g6_variants": "bf16=google/gemma-4-E2B-it,int8=package:int8"}}))
    _bootstrap("us-east-1")
    # g6.xlarge (4 vCPUs) x (G6Stack + two variants) = 12 needed, 8 allowed
    rc = preflight.main(["--region", "us-east-1", "--cdk-json", str(p)], session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-DB2E81BA": 8}), **ready())
    out = capsys.readouterr().out
    assert rc == 1 and "= 8 vCPUs, selected stacks need 12" in out, out
    assert preflight.targets_from_config(json.loads(p.read_text())["context"], None)[1][0].copies == 3
    rc = preflight.main(["--region", "us-east-1", "--cdk-json", str(p)], session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-DB2E81BA": 12}), **ready())
    assert rc == 0, capsys.readouterr().out
