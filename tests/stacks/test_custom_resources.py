"""Every Lambda-backed custom resource of the kit comes from stacks/custom_resource.py, and moving
them there replaced nothing a deployed stack holds.

``data/custom_resource_ids.json`` lists, per stack, the logical ids of every function, role,
policy, log group and custom resource the templates held before the four handlers shared one
construct (synthesized from the default cdk.json context at that commit). CloudFormation replaces
a resource whose logical id changes (it deletes the old id and creates the new one), so every
one of them must still be there; new resources may be added beside them.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks.lambda_code import handler_name

BEFORE = json.loads((Path(__file__).parent / "data" / "custom_resource_ids.json").read_text())
HANDLERS = {"Custom::AzChoice": "az_choice", "Custom::AmiByName": "ami_by_name",
            "Custom::ImagesReady": "images_ready", "Custom::EndpointReady": "endpoint_ready",
            "Custom::EndpointTtlRelease": "endpoint_ready"}


@pytest.mark.parametrize("stack", sorted(BEFORE))
def test_no_logical_id_of_the_custom_resource_parts_changed(kit, stack):
    now = set(kit.templates[stack]["Resources"])
    gone = sorted(set(BEFORE[stack]) - now)
    assert not gone, f"{stack}: these logical ids would be replaced on deploy: {gone}"


def _function_of(template: dict, resource: dict) -> tuple[str, dict]:
    token = resource["Properties"]["ServiceToken"]
    lid, attr = token["Fn::GetAtt"]
    assert attr == "Arn"
    return lid, template["Resources"][lid]


def test_every_custom_resource_is_served_by_one_shaped_function(kit):
    seen = set()
    for stack, template in kit.templates.items():
        res = template["Resources"]
        for lid, r in res.items():
            if not r["Type"].startswith("Custom::"):
                continue
            seen.add(r["Type"])
            assert r["Type"] in HANDLERS, f"{stack}/{lid}: {r['Type']} is not a kit custom resource"
            fid, fn = _function_of(template, r)
            p = fn["Properties"]
            assert p["Handler"] == handler_name(HANDLERS[r["Type"]]), (stack, lid)
            assert p["Runtime"] == "python3.14" and p["MemorySize"] == 128
            assert "DependsOn" not in fn, f"{stack}/{fid}: the function must not wait for its role (cfn-lint W3005)"
            # ... the resource waits for the role's policy instead, so its first call is allowed.
            role_lid = p["Role"]["Fn::GetAtt"][0]
            policies = [k for k, v in res.items() if v["Type"] == "AWS::IAM::Policy"
                        and {"Ref": role_lid} in v["Properties"]["Roles"]]
            assert policies and set(policies) <= set(r.get("DependsOn", [])), (stack, lid)
            # Its logs go to its own group, kept a week and deleted with the stack.
            group = res[p["LoggingConfig"]["LogGroup"]["Ref"]]
            assert group["Properties"]["RetentionInDays"] == 7 and group["DeletionPolicy"] == "Delete"
            statements = [s for k in policies for s in res[k]["Properties"]["PolicyDocument"]["Statement"]]
            own = [s for s in statements if s.get("Sid") == "OwnLogs"]
            assert len(own) == 1 and set(own[0]["Action"]) == {"logs:CreateLogStream", "logs:PutLogEvents"}
    assert seen == set(HANDLERS), f"custom resources never synthesized: {sorted(set(HANDLERS) - seen)}"
