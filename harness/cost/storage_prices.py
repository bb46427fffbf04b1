"""Monthly prices of what outlives a deploy (AMI snapshots, volumes, buckets, log groups, a
secret, a public IPv4 address), for ``harness.account.images list`` and ``harness.account.leftovers``.

Dated figures, each with its source; us-east-1 list prices (other regions differ by a few per
cent, and every line that uses one says "us-east-1 price"). The Price List API has these too
(AmazonEC2 productFamily "Storage Snapshot", usagetype EBS:SnapshotUsage, and "Storage"
EBS:VolumeUsage.gp3: cur.vantage.sh's billing-code catalogue); the kit does not query them live.
"""
from __future__ import annotations

from dataclasses import dataclass

HOURS_PER_MONTH = 730  # the convention the kit's cost model uses (24 x 365 / 12)
GIB = 1024 ** 3


@dataclass(frozen=True)
class StoragePrice:
    usd: float
    unit: str
    source: str


AS_OF = "2026-12-01"
PRICES: dict[str, StoragePrice] = {
    # Amazon EBS User Guide, "Pricing and billing for archiving Amazon EBS snapshots"
    # (snapshot-archive-pricing.html): "the snapshot is billed at the standard rate for snapshots of
    # $0.05 per GB-month". Standard tier bills the blocks stored (re:Post knowledge center
    # "ebs-snapshot-billing": "Amazon EBS snapshots capture only blocks that contain data").
    "ebs_snapshot": StoragePrice(0.05, "GB-month", "EBS User Guide, snapshot-archive-pricing.html"),
    # gp3 storage, us-east-1: $0.08 per GB-month (GitLab docker-machine MR !45 quoting the EBS price
    # page: ".08 * 50 GB-month = $4"); baseline 3,000 IOPS / 125 MB/s included.
    "ebs_gp3": StoragePrice(0.08, "GB-month", "EBS pricing page as quoted in gitlab-org/ci-cd/docker-machine!45"),
    # S3 Standard, first 50 TB, us-east-1: $0.023 per GB-month (as tabulated from the S3 price page
    # in JasonZ-Git/JasonTechnology git-books/AWS_Pricing_Simple.md).
    "s3_standard": StoragePrice(0.023, "GB-month", "S3 pricing page, us-east-1 Standard first 50 TB (secondary)"),
    # CloudWatch Logs stored (archived) data: $0.03 per GB-month, us-east-1 (CloudWatch pricing page).
    "logs_storage": StoragePrice(0.03, "GB-month", "CloudWatch pricing page, Logs 'Store (Archival)' (secondary)"),
    # Secrets Manager: $0.40 per secret per month (hivebook "aws-secrets-manager": "$0.40 per secret
    # per month + $0.05 per 10k API calls").
    "secret": StoragePrice(0.40, "secret-month", "Secrets Manager pricing page (secondary)"),
    # Public IPv4: $0.005 per address-hour since 2024-02-01, attached or idle (AWS News Blog "New
    # AWS Public IPv4 Address Charge"; doit.com guide: "$0.005/Hour ($3.65/Month)").
    "public_ipv4": StoragePrice(0.005, "hour", "AWS News Blog, public IPv4 address charge (2024-02-01)"),
    # SSM Parameter Store: Standard parameters cost nothing to store; Advanced $0.05 per parameter-month.
    "ssm_advanced": StoragePrice(0.05, "parameter-month", "Systems Manager pricing page, Parameter Store"),
    # A customer managed KMS key: "Each AWS KMS key that you create in AWS KMS costs $1/month
    # (prorated hourly)"; "There is no charge for customer managed KMS keys that ... are scheduled
    # for deletion" (AWS KMS pricing page, Key storage). Each automatic rotation adds $1/month.
    "kms_key": StoragePrice(1.00, "key-month", "AWS KMS pricing page, Key storage"),
}


def monthly(kind: str, quantity: float) -> float:
    """$/month for ``quantity`` of ``kind`` (GB for per-GB prices, count otherwise)."""
    p = PRICES[kind]
    return p.usd * quantity * (HOURS_PER_MONTH if p.unit == "hour" else 1)


def gb(nbytes: float) -> float:
    """Bytes -> GB as AWS bills storage (GB-month of 2^30 bytes)."""
    return nbytes / GIB
