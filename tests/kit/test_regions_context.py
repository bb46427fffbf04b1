"""kit/regions.py reads the context the CDK CLI gives the app: -c, then cdk.json's "context",
then cdk.context.json, then ~/.cdk.json's "context", first wins (aws-cdk-cli
packages/aws-cdk/lib/cli/user-configuration.ts, Configuration.loadConfigFiles)."""
from __future__ import annotations

import json
import subprocess

import pytest

from kit import regions
from kit.jsonfile import JsonFileError


@pytest.fixture
def project(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    root = tmp_path / "kit"
    root.mkdir()
    return root, home


def write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_cdk_json_over_cdk_context_json_over_user_cdk_json_and_c_over_all(project):
    root, home = project
    cdk = write(root / "cdk.json", {"app": "x", "context": {"ttl_hours": 8, "max_model_len": 4096}})
    write(root / "cdk.context.json", {"region": "us-west-2", "backends": "inf2", "ttl_hours": 2,
                                      "inf2_ami": "ami-0123456789abcdef0"})
    write(home / ".cdk.json", {"context": {"region": "eu-west-1", "idle_stop_minutes": 30}})
    ctx = regions.read_context(cdk, required=True)
    assert ctx == {"ttl_hours": 8, "max_model_len": 4096,  # cdk.json wins over cdk.context.json
                   "region": "us-west-2", "backends": "inf2", "inf2_ami": "ami-0123456789abcdef0",  # over ~/.cdk.json
                   "idle_stop_minutes": 30}
    assert regions.context_with(cdk, ["region=ap-south-1"], required=True)["region"] == "ap-south-1"
    assert [p.name for p, _ in regions.context_files(cdk, required=True)] == ["cdk.json", "cdk.context.json", ".cdk.json"]


def test_the_harness_resolves_the_region_and_amis_of_an_organizers_handout(project):
    root, _ = project
    cdk = write(root / "cdk.json", {"context": {"hf_token_secret": "inference-kit/hf-token"}})
    write(root / "cdk.context.json", {"region": "us-west-2", "backends": "inf2",
                                      "inf2_ami": "ami-0123456789abcdef0"})
    kit = regions.resolve(cdk_json=cdk)
    assert (kit.region, kit.source) == ("us-west-2", "context region")
    from kit.config import parse

    config = parse(regions.read_context(cdk))
    assert config.backend_ids == ("inf2",) and config.backend("inf2").ami == "ami-0123456789abcdef0"


def test_a_cdk_json_value_hides_the_handouts_as_cdk_would(project):
    root, _ = project
    cdk = write(root / "cdk.json", {"context": {"region": "us-east-1"}})
    write(root / "cdk.context.json", {"region": "us-west-2"})
    assert regions.resolve(cdk_json=cdk).region == "us-east-1"


def test_objects_merge_key_by_key_and_lists_replace_as_the_cli_merges_them(project):
    root, home = project
    cdk = write(root / "cdk.json", {"context": {"tags": {"team": "a"}, "azs": ["us-west-2a"]}})
    write(root / "cdk.context.json", {"tags": {"team": "b", "cost": "x"}, "azs": ["us-west-2b", "us-west-2a"]})
    ctx = regions.read_context(cdk)
    assert ctx["tags"] == {"team": "a", "cost": "x"}
    assert ctx["azs"] == ["us-west-2a"]  # a list is a value: the higher source's


def test_no_files_is_empty_and_a_missing_named_cdk_json_is_refused(project):
    root, _ = project
    assert regions.read_context(root / "cdk.json") == {}
    with pytest.raises(JsonFileError, match="--cdk-json"):
        regions.read_context(root / "cdk.json", required=True)


@pytest.mark.parametrize("content, words", [("{nope", "not JSON"), ("[1]", "not an object")])
def test_a_broken_cdk_context_json_is_one_line_naming_it(project, content, words):
    root, _ = project
    cdk = write(root / "cdk.json", {"context": {}})
    (root / "cdk.context.json").write_text(content)
    with pytest.raises(JsonFileError) as e:
        regions.read_context(cdk)
    assert "cdk.context.json" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(regions.RegionError, match="cdk.context.json"):  # resolve: one line, not a traceback
        regions.resolve(cdk_json=cdk)


def test_the_cdk_cli_reads_the_same_context(project):
    """The installed CDK CLI (``cdk context --json`` prints the context it gives the app), in the
    same folder with the same three files and -c, prints what kit.regions reads."""
    import shutil
    from pathlib import Path

    cdk_bin = Path(regions.__file__).resolve().parent.parent / "node_modules" / ".bin" / "cdk"
    node = shutil.which("node")
    if node is None or not cdk_bin.exists():
        pytest.skip("node or node_modules/.bin/cdk not installed (make setup)")
    root, home = project
    cdk = write(root / "cdk.json", {"app": "true", "context": {"ttl_hours": 8, "tags": {"team": "a"}}})
    write(root / "cdk.context.json", {"region": "us-west-2", "ttl_hours": 2, "tags": {"cost": "x"},
                                      "azs": ["us-west-2a"]})
    write(home / ".cdk.json", {"context": {"region": "eu-west-1", "idle_stop_minutes": 30, "azs": ["us-west-2b"]}})
    r = subprocess.run([str(cdk_bin), "context", "--json", "--no-notices", "-c", "max_model_len=2048"], cwd=root,
                       capture_output=True, text=True, timeout=120,
                       env={"HOME": str(home), "PATH": str(Path(node).parent), "CDK_DISABLE_CLI_TELEMETRY": "true"})
    assert r.returncode == 0, r.stderr[-2000:]
    expected = regions.context_with(cdk, ["max_model_len=2048"])
    assert json.loads(r.stdout) == expected
    assert expected["region"] == "us-west-2" and expected["ttl_hours"] == 8  # the order, not only agreement
