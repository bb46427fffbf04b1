"""The stack-output contract (kit/contracts/outputs.py): the one list both sides use. The synth
tests (tests/stacks/test_synth.py, test_variants.py) check every backend stack's template emits
exactly ``keys_for`` its service; here: the list itself, the emitter refusing anything else, and
discovery reading only declared keys."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kit.contracts import outputs as c

ROOT = Path(__file__).resolve().parents[2]


def test_keys_per_service_as_documented():
    assert c.COMMON_KEYS == ("BackendId", "Service", "Region", "ModelId", "InstanceType", "TtlExpiresAt",
                             "IdleStopMinutes")
    assert c.KIND_KEYS == {"ec2": ("InstanceId", "Port", "SshUser", "ModelRevision"),
                           "sagemaker": ("EndpointName", "EndpointNames", "ModelRevision"),
                           "bedrock": ("ModelArn", "InvokePolicyArn", "InvokeRoleArn")}
    assert c.keys_for("ec2", variant=True, package=True)[-3:] == ("Variant", "Scheme", "PackageUri")
    assert "PackageUri" not in c.keys_for("sagemaker", variant=True, package=True)
    assert "Variant" not in c.keys_for("bedrock", variant=True)
    with pytest.raises(ValueError, match="service 'lambda' is not one of ec2, sagemaker, bedrock"):
        c.keys_for("lambda")


def test_every_key_is_documented_in_docs_stacks():
    doc = (ROOT / "docs" / "stacks.md").read_text()
    table = doc[doc.index("## Outputs"):doc.index("## Guardrails")]
    for k in c.OUTPUT_KEYS:
        assert f"`{k.name}`" in table, k.name


def _keys_read(path: Path) -> set[str]:
    """String keys the module reads from a mapping named ``outputs``: outputs.get("K"), outputs["K"]."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "outputs" and node.args \
                and isinstance(node.args[0], ast.Constant):
            found.add(node.args[0].value)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "outputs" \
                and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
    return found


def test_discovery_reads_only_declared_keys():
    read = _keys_read(ROOT / "harness" / "discovery.py")
    assert {"BackendId", "Service", "ModelId", "Variant", "Scheme", "SshUser", "TtlExpiresAt"} <= read
    assert read <= set(c.BY_NAME), read - set(c.BY_NAME)


def test_discovery_requires_what_the_contract_marks_required():
    from harness.discovery import SERVICE_OUTPUTS

    assert SERVICE_OUTPUTS == {"ec2": {"instance_id": "InstanceId", "port": "Port"},
                               "sagemaker": {"endpoint_name": "EndpointName"}, "bedrock": {}}


def test_the_emitter_refuses_a_key_the_contract_does_not_declare(monkeypatch):
    import aws_cdk as cdk

    from stacks import outputs

    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(region="us-east-1"))
    monkeypatch.setattr(outputs, "keys_for", lambda *a, **k: c.COMMON_KEYS)  # a contract without ModelArn...
    with pytest.raises(ValueError, match="differ from the contract's"):
        outputs.add_outputs(stack, backend_id="bedrock", service="bedrock", model_id="m", instance_type="managed",
                            ttl_expires_at=None, idle_stop_minutes=0, ModelArn="a", InvokePolicyArn="p",
                            InvokeRoleArn="r")
