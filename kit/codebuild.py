"""CodeBuild facts the package build shares: the project's build environment (stacks/package.py
builds it), the Service Quotas code that bounds it (harness.account.preflight checks it) and what a
``StartBuild`` refused for that quota means (harness.package start says it in one line).

Plain Python, no aws-cdk-lib, no boto3.
"""
from __future__ import annotations

import re

# The package build's environment: CPU only, 15 GB of memory (stacks/package.py says why).
ENVIRONMENT_TYPE = "LINUX_CONTAINER"
COMPUTE_TYPE = "BUILD_GENERAL1_LARGE"

# Service Quotas, service code codebuild: one concurrent-build quota per environment type and
# compute size. Source: the AWS default quotas as listed by ``list-aws-default-service-quotas``
# in gruntwork-io/terraform-aws-utilities docs/quotas.md (commit 04f58839, the list the EC2
# codes in harness/account/preflight_fresh.py come from), e.g. "| AWS CodeBuild | codebuild |
# Concurrently running builds for Linux/Large environment | L-4DDC4A99 | 1.0 |". The name's
# "Linux/Large" is environment type LINUX_CONTAINER with compute type BUILD_GENERAL1_LARGE.
CONCURRENT_BUILD_QUOTAS: dict[tuple[str, str], tuple[str, str]] = {
    ("LINUX_CONTAINER", "BUILD_GENERAL1_SMALL"): ("L-9D07B6EF", "Concurrently running builds for Linux/Small environment"),
    ("LINUX_CONTAINER", "BUILD_GENERAL1_MEDIUM"): ("L-2DC20C30", "Concurrently running builds for Linux/Medium environment"),
    ("LINUX_CONTAINER", "BUILD_GENERAL1_LARGE"): ("L-4DDC4A99", "Concurrently running builds for Linux/Large environment"),
    ("LINUX_CONTAINER", "BUILD_GENERAL1_XLARGE"): ("L-04E5CA62", "Concurrently running builds for Linux/XLarge environment"),
    ("LINUX_CONTAINER", "BUILD_GENERAL1_2XLARGE"): ("L-0397D009", "Concurrently running builds for Linux/2XLarge environment"),
}
# "builds are queued if the number of running builds reaches the concurrent build limit for the
# platform and compute type. The maximum number of builds in a queue is five times the concurrent
# build limit" (CodeBuild User Guide, "Builds in AWS CodeBuild"). So a limit of 0 queues nothing:
# StartBuild answers AccountLimitExceededException "Cannot have more than 0 builds in queue for
# the account" (the message as public reports quote it: aws-ia/terraform-aws-control_tower_account_factory#100,
# aws-samples/aws-secure-environment-accelerator#982). New accounts meet it although Service
# Quotas shows a default of 1 or more (the same reports; data-dot-all/dataall#100 with 60).
QUEUE_FACTOR = 5
_QUEUE_LIMIT = re.compile(r"Cannot have more than (\d+) builds? in queue")


def package_build_quota() -> tuple[str, str]:
    """(quota code, quota name) of the package build's environment."""
    return CONCURRENT_BUILD_QUOTAS[(ENVIRONMENT_TYPE, COMPUTE_TYPE)]


def queue_limit(message: str) -> int | None:
    """The N of "Cannot have more than N builds in queue", None for another message."""
    m = _QUEUE_LIMIT.search(message)
    return int(m.group(1)) if m else None
