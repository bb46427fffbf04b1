"""cdk-nag (3.x, validation-plugin API) wiring and the one helper for acknowledgments.

Every acknowledgment is made next to the construct it excuses, with a reason a reviewer can
check; this module only holds the mechanics. Catalog facts read: none.
"""
from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

SSM_CORE = "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]"
_PACK = "AwsSolutions::"


def enable(app: cdk.App) -> None:
    """AwsSolutions checks on every stack; a violation makes synth fail with a report."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding (``rule`` as cdk-nag names it, e.g. ``AwsSolutions-EC29``)
    on ``scope`` and everything below it."""
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=_PACK + rule, reason=reason))
