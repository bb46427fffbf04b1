"""Whenever CloudFormation replaces an EC2 backend's instance, for any reason,
the deploy waits for the new instance to answer (stacks/inference_instance.py, gate 1).

What replaces a resource is read from the resource's registry schema as cfn-lint ships it
(``createOnlyProperties``: a change to one of these replaces the resource; the same schemas
CloudFormation publishes per region). A change propagates: a replaced resource gets a new physical
id, so a create-only property that refers to it changes too. A creation policy is invoked whenever
CloudFormation creates the resource (CloudFormation User Guide, CreationPolicy attribute), and a
replacement creates it; a wait condition supports no updates (AWS::CloudFormation::WaitCondition
reference: "Updates aren't supported") and has no create-only property, so only a new logical id
makes a new one.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

import pytest
from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER

from tests.stacks.conftest import EC2_STACKS

STACKS = sorted(EC2_STACKS.items())


def create_only(region: str, type_: str) -> set[str]:
    """Top-level create-only property names of a resource type (registry schema via cfn-lint)."""
    if type_.startswith("Custom::"):
        type_ = "AWS::CloudFormation::CustomResource"
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, type_).schema
    return {p.split("/")[2] for p in schema.get("createOnlyProperties", []) if p.startswith("/properties/")}


def references(value: Any) -> set[str]:
    """Names a value depends on: parameters and resources (Ref), and "Resource.Attribute" (GetAtt)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            found.add(value["Ref"])
        if "Fn::GetAtt" in value:
            lid, attr = value["Fn::GetAtt"] if isinstance(value["Fn::GetAtt"], list) else value["Fn::GetAtt"].split(".", 1)
            found.add(f"{lid}.{attr}")
        for v in value.values():
            found |= references(v)
    elif isinstance(value, list):
        for v in value:
            found |= references(v)
    return found


def replaced(template: dict, changed: Iterable[str], region: str = "us-east-1") -> set[str]:
    """Logical ids CloudFormation replaces on an update where only ``changed`` moved (a parameter's
    resolved value, or a "Resource.Attribute" a custom resource returns differently)."""
    moved = set(changed)
    out: set[str] = set()
    while True:
        new = set()
        for lid, res in template["Resources"].items():
            if lid in out:
                continue
            props = res.get("Properties", {})
            for name in create_only(region, res["Type"]):
                refs = references(props.get(name))
                # A replaced resource has a new physical id (Ref) and new attributes (GetAtt).
                if refs & moved or any(r.split(".", 1)[0] in out for r in refs):
                    new.add(lid)
                    break
        if not new:
            return out
        out |= new
        moved |= new


def ungated(template: dict, replacements: set[str]) -> set[str]:
    """Replaced instances nothing waits for: no creation policy asking for a signal."""
    return {lid for lid in replacements
            if template["Resources"][lid]["Type"] == "AWS::EC2::Instance"
            and not template["Resources"][lid].get("CreationPolicy", {}).get("ResourceSignal", {}).get("Count")}


def ami_parameter(template: dict, instance: dict) -> str:
    """What moves when a new AMI is published: the SSM-typed parameter (public DLAMI), or the AMI id
    Custom::ImagesReady reads again on every deploy (the kit's images, stacks/image_guard.py)."""
    image = instance["Properties"]["ImageId"]
    if "Fn::GetAtt" in image:
        lid, attr = image["Fn::GetAtt"]
        assert template["Resources"][lid]["Type"] == "Custom::ImagesReady"
        return f"{lid}.{attr}"
    name = image["Ref"]
    assert template["Parameters"][name]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    return name


@pytest.mark.parametrize("backend,stack", STACKS)
def test_a_new_ami_behind_the_parameter_replaces_the_instance_and_is_waited_for(kit, backend, stack):
    t = kit.templates[stack]
    lid, instance = kit.one(stack, "AWS::EC2::Instance")
    wait_id, _ = kit.one(stack, "AWS::CloudFormation::WaitCondition")
    # CloudFormation resolves the SSM parameter again on every update: "latest" moved.
    gone = replaced(t, {ami_parameter(t, instance)})
    assert lid in gone
    assert wait_id not in gone  # the digest-keyed wait condition alone would not wait: the old bug
    assert not ungated(t, gone)


@pytest.mark.parametrize("backend,stack", STACKS)
def test_every_deploy_time_input_of_the_instance_is_gated(kit, backend, stack):
    """Whatever deploy-time value a create-only property of the instance depends on (parameters,
    attributes of other resources such as the subnet the AZ choice makes), changing it replaces
    the instance and the replacement is waited for."""
    t = kit.templates[stack]
    lid, instance = kit.one(stack, "AWS::EC2::Instance")
    inputs = set()
    for name in create_only("us-east-1", "AWS::EC2::Instance"):
        inputs |= references(instance["Properties"].get(name))
    assert inputs, "the instance has no deploy-time create-only input at all?"
    for moved in sorted(inputs):
        gone = replaced(t, {moved})
        assert lid in gone, moved
        assert not ungated(t, gone), moved


def test_the_check_fails_without_the_creation_policy(kit):
    """The test above can fail: strip the creation policy and the AMI change goes unwaited."""
    stack = "G6Stack"
    t = copy.deepcopy(kit.templates[stack])
    lid, instance = next((k, v) for k, v in t["Resources"].items() if v["Type"] == "AWS::EC2::Instance")
    del instance["CreationPolicy"]
    assert ungated(t, replaced(t, {ami_parameter(t, instance)})) == {lid}


def test_registry_facts_the_gate_relies_on():
    """Recorded from the registry schemas cfn-lint ships (us-east-1)."""
    assert {"ImageId", "SubnetId", "AvailabilityZone"} <= create_only("us-east-1", "AWS::EC2::Instance")
    assert "InstanceType" not in create_only("us-east-1", "AWS::EC2::Instance")  # stop/start, not replace
    assert create_only("us-east-1", "AWS::CloudFormation::WaitCondition") == set()


@pytest.mark.parametrize("backend,stack", STACKS)
def test_the_instance_signals_its_own_creation_policy(kit, backend, stack):
    from tests.stacks.test_ec2_backends import kit_env, user_data

    lid, instance = kit.one(stack, "AWS::EC2::Instance")
    env = kit_env(user_data(instance))
    assert env["KIT_SIGNAL_RESOURCE"] == lid and env["KIT_STACK"] == stack
    timeout = instance["CreationPolicy"]["ResourceSignal"]["Timeout"]
    assert timeout.startswith("PT") and timeout.endswith("M")
    # The script gives up (and signals failure with its reason) before CloudFormation times out.
    assert int(env["KIT_READY_TIMEOUT_S"]) < int(timeout[2:-1]) * 60


def depends_on(template: dict, lid: str) -> set[str]:
    """Resources ``lid`` waits for before CloudFormation starts creating it: DependsOn, Ref and
    GetAtt of other resources, transitively."""
    res = template["Resources"]
    seen: set[str] = set()
    todo = [lid]
    while todo:
        r = res[todo.pop()]
        direct = set(r.get("DependsOn", []) if isinstance(r.get("DependsOn"), list) else [r["DependsOn"]]
                     if r.get("DependsOn") else [])
        direct |= {x.split(".", 1)[0] for x in references(r.get("Properties", {}))}
        for d in direct & set(res):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


@pytest.mark.parametrize("backend,stack", STACKS)
def test_the_wait_conditions_clock_starts_when_the_instances_creation_does(kit, backend, stack):
    """A wait condition's timeout runs from its own creation (CloudFormation User
    Guide, "Create wait conditions in a CloudFormation template"). One that waits for nothing but
    its handle starts with the stack, minutes before the AZ choice, subnet, role and instance
    profile let the instance launch, and times out before the boot script's failure signal (the
    log tail, KIT_READY_TIMEOUT_S = timeout - 300 s after boot) arrives. So it waits for everything
    the instance waits for, and not for the instance (both gates run while it boots)."""
    t = kit.templates[stack]
    lid, _ = kit.one(stack, "AWS::EC2::Instance")
    wait_id, wait = kit.one(stack, "AWS::CloudFormation::WaitCondition")
    before_instance = depends_on(t, lid)
    before_wait = depends_on(t, wait_id)
    assert before_instance - before_wait == set()
    assert lid not in before_wait
    assert any(t["Resources"][d]["Type"] == "Custom::AzChoice" for d in before_wait)


def test_the_clock_check_fails_for_a_wait_condition_that_waits_for_its_handle_only(kit):
    t = copy.deepcopy(kit.templates["G6Stack"])
    lid, _ = next((k, v) for k, v in t["Resources"].items() if v["Type"] == "AWS::EC2::Instance")
    wait_id, wait = next((k, v) for k, v in t["Resources"].items() if v["Type"] == "AWS::CloudFormation::WaitCondition")
    wait.pop("DependsOn")
    assert depends_on(t, lid) - depends_on(t, wait_id)
