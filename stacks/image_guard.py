"""Custom::ImagesReady, in every backend stack: nothing billable before the machine images exist.

Which images it checks (every configured deployment's, not only the stack's own, and why) is
stated once, in docs/stacks.md, "Which images a deploy checks"; what ``cdk deploy --all`` meets
without it is in "Nothing billable before the images exist" there. kit/image_needs.py computes
the list; this construct writes it into the template with the handler
(stacks/lambdas/images_ready/index.py) and the handler's role, and every billable resource of the
stack depends on ``resource``. The instance also takes its AMI id from it (``boot_ami``), so the
kit's images are not SSM-typed stack parameters that CloudFormation would refuse with its own
message first.

``CheckedAt`` changes with each synth, so every deploy checks again and hands back the AMI the
parameter holds then: a new image behind the parameter replaces the instance, as the SSM-typed
parameter did.
"""
from __future__ import annotations

from typing import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from kit.config import KitConfig
from kit.image_needs import ImageNeed, image_needs
from stacks.custom_resource import HandlerFunction

BOOT_KEY = "BootAmi"


def properties(needs: Sequence[ImageNeed], own: ImageNeed | None, backends: Sequence[str],
               checked_at: str) -> dict:
    """The custom resource's properties (what the handler reads)."""
    return {
        "Images": [{"Image": n.image, "Region": n.region, "Parameter": n.parameter, "Ami": n.ami,
                    "Stacks": ", ".join(n.stacks), "BackendIds": ",".join(n.backend_ids), "Build": n.fix(),
                    "Key": BOOT_KEY if own is not None and n.key == own.key else ""} for n in needs],
        "Backends": ",".join(backends),
        "CheckedAt": checked_at,
    }


class ImagesReady(Construct):
    """Attributes: ``resource`` (every billable resource depends on it), ``boot_ami`` (a token with
    the AMI id of ``own``, or None when the stack boots a public image or nothing)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: KitConfig, own: ImageNeed | None,
                 checked_at: str) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        needs = image_needs(config)
        if own is not None and own.key not in {n.key for n in needs}:
            needs.append(own)
        statements = []
        parameters = sorted({(n.region, n.parameter) for n in needs if n.parameter})
        if parameters:
            statements.append(iam.PolicyStatement(
                sid="ReadImageParameters", actions=["ssm:GetParameters"],
                resources=[f"arn:{stack.partition}:ssm:{r}:{stack.account}:parameter{p}" for r, p in parameters]))
        if needs:  # the AMI each parameter names, and -c <id>_ami: visible and available
            statements.append(iam.PolicyStatement(sid="SeeAmis", actions=["ec2:DescribeImages"], resources=["*"]))
        check = HandlerFunction(
            self, handler="images_ready", ids=("Logs", "Role", "Function"),
            role_description="Custom::ImagesReady: read the kit's image parameters",
            description="Custom::ImagesReady: every configured machine image exists (stacks/image_guard.py)",
            statements=statements,
            any_resource_reason="ec2:DescribeImages supports no resource-level permissions (Service "
                                "Authorization Reference, Amazon EC2); it only reads whether the AMIs to "
                                "boot are available")
        self.resource = check.resource(self, "Check", resource_type="Custom::ImagesReady",
                                       properties=properties(needs, own, config.backend_ids, checked_at),
                                       service_timeout=cdk.Duration.minutes(2))
        self.boot_ami = self.resource.get_att_string(BOOT_KEY) if own is not None else None
