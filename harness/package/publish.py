"""Upload a finished package to S3, manifest last: a prefix without manifest.json is no package."""
from __future__ import annotations

from pathlib import Path

from harness.package.manifest import MANIFEST
from harness.package.source import PackageError


def parse_s3(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not bucket or not prefix:
        raise PackageError(f"--out {uri}: need s3://bucket/prefix (a prefix, not the bucket root)")
    return bucket, prefix


def _client():
    import boto3

    return boto3.client("s3")


def refuse_existing(bucket: str, prefix: str, client=None) -> None:
    c = client or _client()
    try:
        resp = c.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/", MaxKeys=1)
    except Exception as e:  # noqa: BLE001 - any S3 failure is one PackageError line
        raise PackageError(f"s3://{bucket}/{prefix}: cannot list ({type(e).__name__}: {e})") from None
    if resp.get("KeyCount", 0):
        raise PackageError(f"s3://{bucket}/{prefix}/ is not empty; choose a new prefix")


def upload(work: Path, bucket: str, prefix: str, log=print, client=None) -> None:
    c = client or _client()
    files = sorted((p for p in work.iterdir() if p.is_file()), key=lambda p: (p.name == MANIFEST, p.name))
    for p in files:
        c.upload_file(str(p), bucket, f"{prefix}/{p.name}")
        log(f"uploaded s3://{bucket}/{prefix}/{p.name}")
