"""Preflight counts a backend's variant stacks (kit/variants.py): three g6.xlarge need 12 G vCPUs."""
from __future__ import annotations

import boto3

from harness.account import preflight
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
    assert rc == 1 and "= 8 vCPUs, selected stacks need 12 (g6.xlarge: 4 x 3)" in out, out
    assert preflight.targets_from_config(json.loads(p.read_text())["context"], None)[1][0].copies == 3
    rc = preflight.main(["--region", "us-east-1", "--cdk-json", str(p)], session=boto3.Session(region_name="us-east-1"),
                        quota=_quota({"L-DB2E81BA": 12}), **ready())
    assert rc == 0, capsys.readouterr().out


def _run(tmp_path, context, **inject):
    import json

    p = tmp_path / "twins-cdk.json"
    p.write_text(json.dumps({"app": "x", "context": {"region": "us-east-1", **context}}))
    try:
        _bootstrap("us-east-1")
    except boto3.client("ssm", region_name="us-east-1").exceptions.ParameterAlreadyExists:
        pass  # a second run in the same test
    return preflight.main(["--region", "us-east-1", "--cdk-json", str(p)],
                          session=boto3.Session(region_name="us-east-1"), **{**ready(), **inject})


TWINS = {"backends": "g6", "g6_variants": "g5=@g5.xlarge,g6e=@g6e.xlarge,g7e=@g7e.2xlarge"}


def test_ec2_twins_sum_their_own_vcpus_in_one_quota_class(aws, capsys, tmp_path):
    # g6.xlarge 4 + g5.xlarge 4 + g6e.xlarge 4 + g7e.2xlarge 8 = 20 vCPUs of 'G and VT' (kit/catalog.py)
    rc = _run(tmp_path, TWINS, quota=_quota({"L-DB2E81BA": 16}))
    out = capsys.readouterr().out
    assert rc == 1 and ("= 16 vCPUs, selected stacks need 20 (g6.xlarge: 4, g5.xlarge: 4, g6e.xlarge: 4, "
                        "g7e.2xlarge: 8); fix: ") in out, out
    assert out.count("vCPU quota L-DB2E81BA") == 1  # one line per quota class, not per type
    # each twin's own type is looked up in the region's offerings
    for t in ("g6.xlarge", "g5.xlarge", "g6e.xlarge", "g7e.2xlarge"):
        assert f"{t} offered" in out, out
    rc = _run(tmp_path, TWINS, quota=_quota({"L-DB2E81BA": 20}))
    out = capsys.readouterr().out
    assert "20 vCPUs >= 20 needed" in out, out


def test_each_twin_is_priced_on_its_own_type(aws, capsys, tmp_path):
    _run(tmp_path, TWINS, quota=_quota({"L-DB2E81BA": 64}))
    lines = {ln.split()[1]: ln for ln in capsys.readouterr().out.splitlines() if " price " in ln}
    # the snapshot's us-east-1 on-demand prices (harness/cost/price_snapshot.json)
    assert "g5.xlarge $1.006/h on demand (snapshot " in lines["g6@g5"]
    assert "g6e.xlarge $1.861/h" in lines["g6@g6e"] and "g7e.2xlarge $3.3631/h" in lines["g6@g7e"]
    # g6.xlarge's snapshot row is us-east-2's: said so, not passed off as us-east-1's
    assert "g6.xlarge $0.8048/h" in lines["g6"] and "us-east-2's price, not us-east-1's" in lines["g6"]


def test_sagemaker_endpoints_of_one_type_count_against_its_quota(aws, capsys, tmp_path):
    ctx = {"backends": "sagemaker", "sagemaker_instance_types": "ml.g6.xlarge,ml.g6e.xlarge",
           "sagemaker_variants": "again=google/gemma-4-E2B-it@ml.g6.xlarge"}
    quotas = {"ml.g6.xlarge": 1.0, "ml.g6e.xlarge": 1.0}
    rc = _run(tmp_path, ctx, sagemaker_quota=lambda t: quotas[t])
    out = capsys.readouterr().out
    assert rc == 1 and "'ml.g6.xlarge for endpoint usage' = 1, selected stacks need 2; fix: " in out, out
    assert "--desired-value 2" in out and "ml.g6e.xlarge for endpoint usage = 1" in out
    quotas["ml.g6.xlarge"] = 2.0
    assert _run(tmp_path, ctx, sagemaker_quota=lambda t: quotas[t]) == 0, capsys.readouterr().out
