"""A package built to s3://: every file uploaded, manifest.json last; a used prefix is refused."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

from harness.package.build import build  # noqa: E402
from harness.package.publish import parse_s3  # noqa: E402
from kit.schemes import SCHEMES  # noqa: E402
from harness.package.source import PackageError  # noqa: E402
from tests.package import tiny  # noqa: E402


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with moto.mock_aws():
        c = boto3.client("s3")
        c.create_bucket(Bucket="kit-packages")
        yield c


def test_build_to_s3_uploads_every_file_manifest_last(s3, tmp_path):
    tiny.make_checkpoint(tmp_path / "src")
    lines = []
    manifest = build(str(tmp_path / "src"), "s3://kit-packages/package/emb4", SCHEMES["emb4"],
                     work_root=str(tmp_path), log=lines.append)
    uploads = [ln.rsplit("/", 1)[-1] for ln in lines if ln.startswith("uploaded ")]
    assert uploads[-1] == "manifest.json"
    assert set(uploads) == set(manifest["files"]) | {"manifest.json"}
    body = s3.get_object(Bucket="kit-packages", Key="package/emb4/manifest.json")["Body"].read()
    assert json.loads(body)["scheme"] == "emb4"
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # the local work dir is gone
    with pytest.raises(PackageError, match="not empty"):
        build(str(tmp_path / "src"), "s3://kit-packages/package/emb4", SCHEMES["emb4"], log=lambda _: None)


def test_s3_uri_needs_a_prefix():
    assert parse_s3("s3://b/p/q/") == ("b", "p/q")
    with pytest.raises(PackageError, match="need s3://bucket/prefix"):
        parse_s3("s3://b")
