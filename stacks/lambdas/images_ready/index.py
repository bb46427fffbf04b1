"""Custom resource Custom::ImagesReady: before anything billable in a backend stack is created,
check that every machine image the configured backends boot exists, and hand this stack's own
boot AMI id to its instance.

Why a custom resource (stacks/image_guard.py says where it sits): ``cdk deploy --all`` deploys
the stacks one by one, and a stack whose image parameter does not exist is refused by
CloudFormation only when its own turn comes ("ValidationError ... when calling the
CreateChangeSet operation: Unable to fetch parameters [<name>] from parameter store for this
account", awslabs/aws-deployment-framework#659; aws-samples/amazon-connect-custom-ccp#2 shows
the same line from a CDK deploy), by which time SageMakerStack or G6Stack may be up and billing.
Every billable resource of every backend stack depends on this resource, and it checks the
images of *all* configured backends, so the first backend stack that deploys refuses the whole
selection, one line per missing image with the command that builds it.

Properties: ``Images``, a list of {Image, Region, Parameter | Ami, Stacks, BackendIds, Build,
Key}; ``Backends``, the configured backend ids (for the "deploy without them" line);
``CheckedAt``, which changes on every synth so every deploy checks again and re-reads the
parameters (as CloudFormation re-resolves an SSM-typed parameter on every update: a new AMI
behind the parameter replaces the instance). Data: ``<Key>`` -> the AMI id, for the entries that
carry a Key.

Calls: SSM ``GetParameters`` (names it cannot find come back in ``InvalidParameters``, at most 10
names a call: SSM API reference, GetParameters) per region, then EC2 ``DescribeImages`` for every
AMI id a parameter holds and every explicit ``-c <id>_ami`` (an AMI that is neither the account's
nor shared with it, or was deregistered, is not returned: ``InvalidAMIID.NotFound``; one that is
not ``available`` cannot launch). A parameter outlives its AMI: Image Builder writes it, no stack
owns it, and ``harness.account.leftovers`` lists the AMI's snapshots as billing and the parameter as free,
so a deregistered AMI behind a present parameter is the usual way an image goes missing; without
this check the instance's ``CreateInstance`` would fail on it only after other stacks were up.
Delete does nothing. Standard library and boto3 only.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from ..cfn_response import answer, respond

ClientFor = Callable[[str, str], Any]  # (service, region) -> boto3 client


class NotReady(Exception):
    """Some image is missing; str(e) is the reason CloudFormation shows (one line per image)."""


# SSM may authorize a request for a parameter that does not exist against the region's wildcard
# resource, not the parameter's ARN, so a role allowed only the parameters' ARNs (this function's)
# is denied instead of told the name is unknown: "is not authorized to perform: ssm:GetParameter
# on resource: arn:aws:ssm:eu-central-1:<accountid>:* because no identity-based policy allows" for
# a parameter that did not exist, from a role allowed ssm:GetParameter on ``parameter/*``
# (aws-solutions/aws-control-tower-customizations#208; the role: its
# customizations-for-aws-control-tower.template, StackSetCodeBuildRole, at v2.8.4); ClarkSource/k8t#82
# quotes the same message. GetParameters is documented to list unknown names in InvalidParameters
# instead; either answer must read as "does not exist", or a fresh account's first deploy would
# refuse with an access error that names no image and no build command. A denial naming a
# parameter's own ARN is a real one and is raised.
_WILDCARD_DENIAL = re.compile(r"on resource: arn:[^: ]+:ssm:[^: ]*:[0-9]*:\*(\s|$)")


def _denied_as_unknown(e: Exception) -> bool:
    err = getattr(e, "response", {}).get("Error", {})
    return err.get("Code") == "AccessDeniedException" and bool(_WILDCARD_DENIAL.search(err.get("Message", "")))


def _parameters(ssm: Any, names: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i in range(0, len(names), 10):
        batch = names[i:i + 10]
        try:
            answers = [ssm.get_parameters(Names=batch)]
        except Exception as e:
            if not _denied_as_unknown(e):
                raise
            answers = []
            for name in batch:  # which of them is unknown: one name a call
                try:
                    answers.append(ssm.get_parameters(Names=[name]))
                except Exception as e1:
                    if not _denied_as_unknown(e1):
                        raise
                    out[name] = None
        for r in answers:
            out.update({p["Name"]: p.get("Value") for p in r.get("Parameters", [])})
            out.update({n: None for n in r.get("InvalidParameters", [])})
    return out


def _ami_state(ec2: Any, ami: str) -> str | None:
    """The AMI's state when this account can see it, else None."""
    try:
        images = ec2.describe_images(ImageIds=[ami]).get("Images", [])
    except Exception as e:
        code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
        if code.startswith("InvalidAMIID"):
            return None
        raise
    return images[0].get("State") if images else None


def check(images: list[Mapping[str, Any]], backends: list[str], client: ClientFor) -> dict[str, str]:
    """Key -> AMI id of every entry with a Key. Raises NotReady naming every missing image."""
    by_region: dict[str, list[str]] = {}
    for im in images:
        if im.get("Parameter"):
            by_region.setdefault(im["Region"], []).append(im["Parameter"])
    values: dict[tuple[str, str], str | None] = {}
    for region, names in by_region.items():
        got = _parameters(client("ssm", region), sorted(set(names)))
        values.update({(region, n): v for n, v in got.items()})
    states: dict[tuple[str, str], str | None] = {}  # (region, AMI id) -> state, asked once each

    def state_of(region: str, ami: str) -> str | None:
        if (region, ami) not in states:
            states[(region, ami)] = _ami_state(client("ec2", region), ami)
        return states[(region, ami)]

    found: dict[str, str] = {}
    lines: list[str] = []
    left_out: set[str] = set()
    for im in images:
        where = f"{im['Region']}"
        if im.get("Parameter"):
            ami = values.get((im["Region"], im["Parameter"]))
            if not ami:
                problem = f"{im['Parameter']} does not exist"
            else:
                state = state_of(im["Region"], ami)
                problem = (None if state == "available" else
                           f"{im['Parameter']} names {ami}, which is not visible to this account (deregistered?)"
                           if state is None else f"{im['Parameter']} names {ami}, which is {state}")
        else:
            ami = im["Ami"]
            state = state_of(im["Region"], ami)
            problem = (None if state == "available" else
                       f"{ami} is not visible to this account" if state is None else f"{ami} is {state}")
        if problem:
            verb = "boots" if "," not in im["Stacks"] else "boot"
            lines.append(f"image {im['Image']} ({where}): {problem} ({im['Stacks']} {verb} it); {im['Build']}")
            left_out.update(im.get("BackendIds", "").split(","))
        elif im.get("Key"):
            found[im["Key"]] = ami
    if lines:
        rest = [b for b in backends if b not in left_out]
        head = (f"{len(lines)} machine image{'s are' if len(lines) > 1 else ' is'} missing; nothing billable "
                "was created")
        tail = (f"or deploy without {', '.join(sorted(left_out - {''}))}: -c backends={','.join(rest)}"
                if rest else "")
        raise NotReady("\n".join([head, *lines, *([tail] if tail else [])]))
    return found


def _boto_client(service: str, region: str) -> Any:
    import boto3

    return boto3.client(service, region_name=region)


PHYSICAL = "images-ready"


def physical_id(data: Mapping[str, str]) -> str:
    """The physical id carries the AMI handed out (``images-ready/ami-...``), so a rollback, which
    gets it back in the event, can hand the same AMI to the instance it restores."""
    ami = next(iter(data.values()), "")
    return f"{PHYSICAL}/{ami}" if ami else PHYSICAL


def is_rollback(event: Mapping[str, Any]) -> bool:
    """An Update whose properties are older than the ones it replaces: CloudFormation putting back
    the previous properties after a failed update (the custom resource gets the old ones as
    ResourceProperties; CheckedAt is the synth time, ISO 8601 UTC, so it orders as text)."""
    new = str(event.get("ResourceProperties", {}).get("CheckedAt", ""))
    old = str(event.get("OldResourceProperties", {}).get("CheckedAt", ""))
    return event["RequestType"] == "Update" and bool(new) and bool(old) and new < old


def handler(event: Mapping[str, Any], context: Any, client: ClientFor | None = None, send=respond) -> None:
    props = event.get("ResourceProperties", {})
    if event["RequestType"] != "Delete" and is_rollback(event):
        # A rollback restores; it does not decide again. Never fail it (that would leave the stack
        # UPDATE_ROLLBACK_FAILED), and hand back the AMI this resource gave out before, kept in its
        # physical id, not what the parameter names now: a build published since the failed update
        # began would otherwise hand the restored template an AMI its running instance was not
        # launched from, and CloudFormation would replace that instance in the middle of the rollback.
        physical = event.get("PhysicalResourceId") or PHYSICAL
        previous = physical.partition("/")[2]
        keys = [i["Key"] for i in props.get("Images", []) if i.get("Key")]
        print(json.dumps({"rollback": physical}))
        return send(event, "SUCCESS", physical, {k: previous for k in keys if previous})

    def work() -> tuple[str, dict[str, str]]:
        data = check(list(props.get("Images", [])), [b for b in str(props.get("Backends", "")).split(",") if b],
                     client or _boto_client)
        return physical_id(data), data

    # NotReady is the refusal itself; anything else (e.g. access denied) means it could not check.
    return answer(event, work, known=(NotReady,), physical=PHYSICAL,
                  unexpected="could not check the machine images: ", send=send)
