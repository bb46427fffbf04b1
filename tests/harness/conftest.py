from __future__ import annotations

import pytest

from harness.access import tunnel as access
from tests.conftest import require_binary
from tests.harness.servers import sshd


@pytest.fixture()
def no_aws(monkeypatch, tmp_path):
    """No credentials from anywhere: env scrubbed, config files pointed at nothing."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture()
def fake_aws(monkeypatch, tmp_path):
    """Credentials that exist but reach nothing real (moto, or code paths that never call AWS)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture()
def key():
    """An ephemeral SSH key, as the access path makes one per connection."""
    return access.new_ephemeral_key()


@pytest.fixture()
def ssh_server(tmp_path, key):
    """A real OpenSSH sshd on loopback that accepts ``key``."""
    sshd_bin = require_binary("/usr/sbin/sshd")
    with sshd(sshd_bin, tmp_path, access.public_key_line(key)) as info:
        yield info


@pytest.fixture()
def aws(monkeypatch):
    """Every AWS call goes to moto, with credentials that reach nothing real."""
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield
