"""``python -m harness images share`` (harness/account/image_share.py) against recorded EC2, SSM and KMS
answers in several regions, each request and answer validated by botocore's Stubber against the
service model (tests/harness/aws_replay.py).

Shapes: EC2 API Reference (DescribeImages: ``BlockDeviceMappings[].Ebs.SnapshotId``, ``State``
pending | available | failed, ``StateReason``; the error ``InvalidAMIID.NotFound`` "The image id
'[ami-...]' does not exist"; CopyImage answers ``ImageId``), KMS API Reference (DescribeKey
``KeyMetadata.KeyManager`` AWS | CUSTOMER, ``KeyState`` Creating | Enabled | Disabled |
PendingDeletion | ..., with ``DeletionDate`` and ``PendingDeletionWindowInDays`` while pending
deletion, botocore kms KeyMetadata; ``NotFoundException`` "Alias ... is not found.";
CreateGrant answers ``GrantToken`` and ``GrantId``), SSM GetParameters (``InvalidParameters`` for a
name that does not exist)."""
from __future__ import annotations

import datetime as dt
import io
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.session import get_session
from botocore.waiter import create_waiter_with_client

from harness.account import images, touched
from kit import regions
from kit.image_facts import IMAGE_PARAMETERS, key_alias
from tests.harness.aws_replay import Error, Replay

OWNER = "123456789012"
EAST, WEST = "us-east-1", "us-west-2"
A1, A2 = "111122223333", "444455556666"
NEURON = IMAGE_PARAMETERS["neuron"]
SOURCE_AMI = "ami-0abcdef1234567890"


def key_arn(region: str, n: int = 1) -> str:
    return f"arn:aws:kms:{region}:{OWNER}:key/{n:08d}-12ab-34cd-56ef-1234567890ab"


class Ec2Replay(Replay):
    """EC2 with its waiters: botocore builds a waiter on any client-like object whose
    ``describe_images`` it calls (botocore.waiter.create_waiter_with_client), here the replay."""

    def get_waiter(self, name: str) -> Any:
        model = get_session().get_waiter_model("ec2")
        (real,) = [w for w in model.waiter_names if w == "".join(p.title() for p in name.split("_"))]
        return create_waiter_with_client(real, model, self)


@dataclass
class World:
    """The organizer's account: images, snapshots, keys and parameters per region."""

    images: dict[str, dict[str, dict]] = field(default_factory=dict)  # region -> AMI -> image
    snapshots: dict[str, dict[str, dict]] = field(default_factory=dict)  # region -> id -> snapshot
    keys: dict[str, dict[str, str]] = field(default_factory=dict)  # region -> key ARN -> KeyManager
    key_states: dict[str, str] = field(default_factory=dict)  # key ARN -> KeyState (default Enabled)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)  # region -> alias -> key ARN
    parameters: dict[str, dict[str, str]] = field(default_factory=dict)  # region -> name -> AMI
    copy_states: list[str] = field(default_factory=lambda: ["available"])  # what a new copy reports, poll by poll
    clients: dict[tuple[str, str], Replay] = field(default_factory=dict)
    ids: Any = field(default_factory=lambda: itertools.count(1))

    def add_image(self, region: str, ami: str, key: str, kit_image: str = "neuron", snaps: int = 2,
                  tags: dict[str, str] | None = None) -> None:
        sids = [f"snap-0{region[3]}{next(self.ids):015x}" for _ in range(snaps)]
        self.images.setdefault(region, {})[ami] = {
            "ImageId": ami, "State": "available", "OwnerId": OWNER, "CreationDate": "2026-12-01T10:02:11.000Z",
            "Name": f"inference-kit-{kit_image}-build-2026-12-01T09-00-00.000Z",
            "BlockDeviceMappings": [{"DeviceName": f"/dev/sd{'abc'[i]}", "Ebs": {
                "SnapshotId": s, "VolumeSize": 150, "VolumeType": "gp3", "Encrypted": True}} for i, s in enumerate(sids)],
            "Tags": [{"Key": k, "Value": v} for k, v in (tags or {"project": "aws-inference-kit",
                                                                  "kit-image": kit_image}).items()]}
        for s in sids:
            self.snapshots.setdefault(region, {})[s] = {
                "SnapshotId": s, "VolumeId": "vol-ffffffff", "State": "completed", "VolumeSize": 150,
                "Encrypted": True, "KmsKeyId": key, "OwnerId": OWNER, "Progress": "100%",
                "StartTime": dt.datetime(2026, 12, 1, 9, 40, tzinfo=dt.timezone.utc),
                "Description": f"Created by CreateImage(i-0a1b2c3d4e5f60718) for {ami}"}

    def client(self, service: str, region: str) -> Replay:
        if (service, region) not in self.clients:
            handler = getattr(self, service)
            self.clients[service, region] = (Ec2Replay if service == "ec2" else Replay)(
                service, lambda op, p, r=region, h=handler: h(r, op, p), region=region)
        return self.clients[service, region]

    def calls(self, service: str, region: str, op: str | None = None) -> list:
        c = self.clients.get((service, region))
        return [x for x in (c.calls if c else []) if op is None or x[0] == op]

    def changes(self) -> list:
        return [(s, r, op) for (s, r), c in self.clients.items() for op, _ in c.calls
                if op.startswith(("modify", "copy", "create"))]

    def aws(self) -> images.Aws:
        return images.Aws(client=self.client, price=lambda t, r: None, sleep=lambda s: None)

    # -- services ----------------------------------------------------------------------------
    def ssm(self, region: str, op: str, p: dict) -> Any:
        assert op == "get_parameters", op
        values = self.parameters.get(region, {})
        out: dict[str, Any] = {"Parameters": [{"Name": n, "Type": "String", "Value": values[n], "Version": 1,
                                               "DataType": "aws:ec2:image"} for n in p["Names"] if n in values]}
        missing = [n for n in p["Names"] if n not in values]
        if missing:
            out["InvalidParameters"] = missing
        return out

    def ec2(self, region: str, op: str, p: dict) -> Any:
        here = self.images.setdefault(region, {})
        if op == "describe_images" and "ImageIds" in p:
            found = [here[i] for i in p["ImageIds"] if i in here]
            if not found:
                return Error("InvalidAMIID.NotFound", f"The image id '[{p['ImageIds'][0]}]' does not exist")
            for img in found:
                if img.get("_states"):
                    img["State"] = img["_states"].pop(0)
            return {"Images": [{k: v for k, v in img.items() if not k.startswith("_")} for img in found]}
        if op == "describe_images":
            assert p["Owners"] == ["self"] and p["Filters"][0]["Name"] == "tag:kit-share", p
            want = p["Filters"][0]["Values"][0]
            return {"Images": [{k: v for k, v in i.items() if not k.startswith("_")} for i in here.values()
                               if {"Key": "kit-share", "Value": want} in i.get("Tags", [])]}
        if op == "describe_snapshots":
            return {"Snapshots": [self.snapshots[region][s] for s in p["SnapshotIds"]]}
        if op in ("modify_image_attribute", "modify_snapshot_attribute"):
            return {}
        if op == "copy_image":
            src = self.images[p["SourceRegion"]][p["SourceImageId"]]
            new = f"ami-0c0{next(self.ids):014x}"
            self.add_image(region, new, p["KmsKeyId"], snaps=len(src["BlockDeviceMappings"]),
                           tags={**({t["Key"]: t["Value"] for t in src["Tags"]} if p.get("CopyImageTags") else {}),
                                 **{t["Key"]: t["Value"] for spec in p["TagSpecifications"]
                                    if spec["ResourceType"] == "image" for t in spec["Tags"]}})
            here[new]["_states"] = list(self.copy_states)
            here[new]["State"] = "pending"
            if self.copy_states[-1] == "failed":
                here[new]["StateReason"] = {"Code": "Client.InternalError", "Message": "Copy failed"}
            return {"ImageId": new}
        raise AssertionError(op)

    def kms(self, region: str, op: str, p: dict) -> Any:
        if op == "describe_key":
            arn = self.aliases.get(region, {}).get(p["KeyId"], p["KeyId"])
            if arn not in self.keys.get(region, {}):
                return Error("NotFoundException", f"Alias arn:aws:kms:{region}:{OWNER}:{p['KeyId']} is not found.")
            state = self.key_states.get(arn, "Enabled")
            meta = {"KeyId": arn.rsplit("/", 1)[1], "Arn": arn, "KeyManager": self.keys[region][arn],
                    "Enabled": state == "Enabled", "KeyState": state}
            if state == "PendingDeletion":
                meta.update(DeletionDate=dt.datetime(2027, 1, 1, tzinfo=dt.timezone.utc), PendingDeletionWindowInDays=30)
            return {"KeyMetadata": meta}
        if op == "create_grant":
            return {"GrantToken": "AQpAM2RhZTk1MGMyNTk2ZmZmMzEyYWVhOWViN2I1MWM4Mzc0MWFiYjc0ZDE1ODkyNGFlNTIzODZhMzgy",
                    "GrantId": "0c237476b39f8bc44e45212e08498fbe3151305030726c0590dd8d3e9f3d6a60"}
        raise AssertionError(op)


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.cdk.json of the machine's user


def project(tmp_path, **context) -> str:
    """An attendee-style clone: cdk.json with the settings given, as the organizer's too."""
    cdk = tmp_path / "cdk.json"
    cdk.write_text(json.dumps({"app": "python3 app.py", "context": context}))
    return str(cdk)


def run(world: World, argv: list[str], cdk_json: str) -> tuple[int, str]:
    out = io.StringIO()
    rc = images.main(["share", *argv, "--cdk-json", cdk_json], aws=world.aws(), out=out)
    return rc, out.getvalue()


def kit_image_world(manager: str = "CUSTOMER", region: str = EAST) -> World:
    w = World()
    w.keys[region] = {key_arn(region): manager}
    w.add_image(region, SOURCE_AMI, key_arn(region))
    w.parameters[region] = {NEURON: SOURCE_AMI}
    return w


def test_a_kit_image_under_the_kits_key_is_shared_launch_snapshots_and_key_and_the_context_printed(tmp_path):
    w = kit_image_world()
    cdk = project(tmp_path)  # as the kit's: none of the handout's keys (they would hide the file's)
    handout = tmp_path / "cdk.context.json"
    rc, out = run(w, ["--account", f"{A1},{A2}", "--write-context", str(handout), "-c", f"region={EAST}",
                      "-c", "backends=inf2"], cdk)
    assert rc == 0, out
    snaps = [b["Ebs"]["SnapshotId"] for b in w.images[EAST][SOURCE_AMI]["BlockDeviceMappings"]]
    assert w.calls("ec2", EAST, "modify_image_attribute") == [("modify_image_attribute", {
        "ImageId": SOURCE_AMI, "LaunchPermission": {"Add": [{"UserId": A1}, {"UserId": A2}]}})]
    assert w.calls("ec2", EAST, "modify_snapshot_attribute") == [
        ("modify_snapshot_attribute", {"SnapshotId": s, "Attribute": "createVolumePermission", "OperationType": "add",
                                       "UserIds": [A1, A2]}) for s in snaps]
    # the snapshots' customer managed key, one grant per account, to the account (EBS User Guide, share-kms-key)
    assert w.calls("kms", EAST, "create_grant") == [("create_grant", {
        "KeyId": key_arn(EAST), "GranteePrincipal": f"arn:aws:iam::{account}:root",
        "Operations": ["Decrypt", "DescribeKey", "CreateGrant", "GenerateDataKey", "GenerateDataKeyWithoutPlaintext",
                       "ReEncryptFrom", "ReEncryptTo"], "Name": f"inference-kit-share-{account}"}) for account in (A1, A2)]
    assert not w.calls("ec2", EAST, "copy_image")
    lines = out.splitlines()
    for account in (A1, A2):  # the same context for each account: a shared AMI keeps its id
        assert (f"attendee (account {account}): npx cdk deploy Inf2Stack -c region={EAST} -c backends=inf2 "
                f"-c inf2_region={EAST} -c inf2_ami={SOURCE_AMI}") in lines
    # who uses the key in the attendee's account: the bootstrap's CloudFormation execution role
    assert (f"the instance launch uses {key_arn(EAST)} through the grant, as the attendee account's CloudFormation "
            "execution role from cdk bootstrap (cdk-hnb659fds-cfn-exec-role-<account>-<region>)") in out
    assert "re-encrypted under the attendee's default EBS key at launch" in out
    assert json.loads(handout.read_text()) == {"region": EAST, "backends": "inf2", "inf2_region": EAST,
                                               "inf2_ami": SOURCE_AMI}
    # what the attendee's harness and cdk deploy read from the handout (kit/regions.py, CDK's order)
    ctx = regions.read_context(tmp_path / "cdk.json")
    assert (ctx["region"], ctx["inf2_ami"]) == (EAST, SOURCE_AMI)
    assert touched.recorded_regions() == []  # nothing was made anywhere


def test_every_backend_that_boots_the_image_gets_it_and_a_second_share_adds_nothing_new(tmp_path):
    w = kit_image_world()
    cdk = project(tmp_path, region=EAST, backends="bedrock,inf2,trn1")
    rc, out = run(w, ["--account", A1], cdk)
    assert rc == 0, out
    assert (f"attendee (account {A1}): npx cdk deploy Inf2Stack Trn1Stack -c region={EAST} -c backends=inf2,trn1 "
            f"-c inf2_region={EAST} -c inf2_ami={SOURCE_AMI} -c trn1_region={EAST} -c trn1_ami={SOURCE_AMI}"
            ) in out.splitlines()
    assert len(w.calls("ec2", EAST, "modify_image_attribute")) == 1  # one image, shared once


def test_an_ami_on_the_aws_managed_key_is_refused_before_anything_changes_with_a_copy_in_its_region(tmp_path):
    w = kit_image_world(manager="AWS", region=WEST)
    cdk = project(tmp_path, region=EAST, backends="inf2", inf2_region=WEST)
    rc, out = run(w, ["--account", A1], cdk)
    assert rc == 1
    line = out.strip()
    assert "\n" not in line and "encrypted with the AWS managed key aws/ebs, which cannot be shared" in line
    # the copy lands in the image's region (without --region the CLI copies into its default
    # region, where `share --ami ... --region us-west-2` would find nothing)
    assert (f"aws ec2 copy-image --source-image-id {SOURCE_AMI} --source-region {WEST} --region {WEST} "
            f"--name inference-kit-neuron-build-2026-12-01T09-00-00.000Z-cmk --encrypted "
            f"--kms-key-id {key_alias('neuron')} --copy-image-tags") in line
    assert f"--ami <the copy's id> --region {WEST}" in line
    assert w.changes() == []


def test_given_ami_on_the_aws_managed_key_is_refused_and_a_given_kit_ami_prints_its_context(tmp_path):
    w = kit_image_world(manager="AWS")
    cdk = project(tmp_path, region=EAST, backends="inf2")
    rc, out = run(w, ["--account", A1, "--ami", SOURCE_AMI], cdk)
    assert rc == 1 and f"--source-region {EAST} --region {EAST}" in out and w.changes() == []
    w = kit_image_world()
    rc, out = run(w, ["--account", A1, "--ami", SOURCE_AMI], cdk)
    assert rc == 0, out
    # the AMI's kit-image tag names the image, so the backends that boot it
    assert f"attendee (account {A1}): npx cdk deploy Inf2Stack -c region={EAST} -c backends=inf2 " \
           f"-c inf2_region={EAST} -c inf2_ami={SOURCE_AMI}" in out.splitlines()


def test_an_image_missing_where_its_backend_runs_is_copied_under_that_regions_kit_key_then_shared(tmp_path, monkeypatch):
    monkeypatch.setattr("botocore.waiter.time.sleep", lambda s: None)  # the waiter's 30 s between polls
    w = kit_image_world()
    w.keys[WEST] = {key_arn(WEST, 2): "CUSTOMER"}
    w.aliases[WEST] = {key_alias("neuron"): key_arn(WEST, 2)}
    w.copy_states = ["pending", "available"]
    cdk = project(tmp_path)
    where = ["-c", f"region={EAST}", "-c", "backends=inf2", "-c", f"inf2_region={WEST}"]
    handout = tmp_path / "cdk.context.json"
    rc, out = run(w, ["--account", A1, "--write-context", str(handout), *where], cdk)
    assert rc == 0, out
    (copy_call,) = w.calls("ec2", WEST, "copy_image")
    share_tags = [{"Key": "project", "Value": "aws-inference-kit"}, {"Key": "kit-share", "Value": f"{SOURCE_AMI} {EAST}"}]
    assert copy_call[1] == {
        "SourceImageId": SOURCE_AMI, "SourceRegion": EAST,
        "Name": f"inference-kit-neuron-build-2026-12-01T09-00-00.000Z-from-{EAST}",
        "Description": f"copy of {SOURCE_AMI} (neuron) from {EAST}, made by harness images share",
        "Encrypted": True, "KmsKeyId": key_arn(WEST, 2), "CopyImageTags": True,
        "TagSpecifications": [{"ResourceType": "image", "Tags": share_tags[1:]},  # project comes with CopyImageTags
                              {"ResourceType": "snapshot", "Tags": share_tags}]}
    (copy,) = [a for a in w.images[WEST]]
    assert {"Key": "project", "Value": "aws-inference-kit"} in w.images[WEST][copy]["Tags"]
    assert touched.recorded_regions() == [WEST]
    # the copy is waited for (pending, then available) and shared in its region under its key
    assert [op for op, _ in w.calls("ec2", WEST)].count("describe_images") >= 3
    assert w.calls("ec2", WEST, "modify_image_attribute") == [("modify_image_attribute", {
        "ImageId": copy, "LaunchPermission": {"Add": [{"UserId": A1}]}})]
    assert [p["KeyId"] for _, p in w.calls("kms", WEST, "create_grant")] == [key_arn(WEST, 2)]
    assert not w.calls("ec2", EAST, "modify_image_attribute")  # the source is not shared: nobody boots it there
    assert json.loads(handout.read_text()) == {"region": EAST, "backends": "inf2", "inf2_region": WEST,
                                               "inf2_ami": copy}
    # a second share copies nothing: the handout names the copy (and a share without it finds the
    # copy by its kit-share tag, below)
    rc, out = run(w, ["--account", A2, *where], cdk)
    assert rc == 0, out
    assert len(w.calls("ec2", WEST, "copy_image")) == 1
    assert f"-c inf2_region={WEST} -c inf2_ami={copy}" in out
    handout.unlink()
    rc, out = run(w, ["--account", A2, *where], cdk)
    assert rc == 0, out
    assert len(w.calls("ec2", WEST, "copy_image")) == 1
    assert f"-c inf2_region={WEST} -c inf2_ami={copy}" in out


def test_no_kit_key_where_a_copy_would_go_is_one_line_and_nothing_changes(tmp_path):
    w = kit_image_world()
    cdk = project(tmp_path, region=EAST, backends="inf2", inf2_region=WEST)
    rc, out = run(w, ["--account", A1], cdk)
    assert rc == 1 and "\n" not in out.strip()
    assert f"{WEST} has no customer managed key of the kit" in out and "npx cdk deploy NeuronImageStack-us-west-2" in out
    assert w.changes() == [] and touched.recorded_regions() == []


def test_a_copy_that_fails_is_one_line_and_stays_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr("botocore.waiter.time.sleep", lambda s: None)
    w = kit_image_world()
    w.keys[WEST] = {key_arn(WEST, 2): "CUSTOMER"}
    w.aliases[WEST] = {key_alias("neuron"): key_arn(WEST, 2)}
    w.copy_states = ["failed"]
    cdk = project(tmp_path, region=EAST, backends="inf2", inf2_region=WEST)
    rc, out = run(w, ["--account", A1], cdk)
    assert rc == 1
    last = out.strip().splitlines()[-1]
    assert "did not become available (Copy failed); nothing was shared" in last and "deregister-image" in last
    assert touched.recorded_regions() == [WEST]
    assert not w.calls("ec2", WEST, "modify_image_attribute") and not w.calls("kms", WEST, "create_grant")


def test_an_image_published_nowhere_names_the_build(tmp_path):
    w = World()
    cdk = project(tmp_path, region=EAST, backends="inf2")
    rc, out = run(w, ["--account", A1], cdk)
    assert rc == 1 and "python -m harness images build neuron --region us-east-1" in out and w.changes() == []


@pytest.mark.parametrize("argv, words", [
    (["--account", f"{A1},12345"], "--account '12345' is not a 12-digit AWS account id"),
    (["--account", A1, "--image", "vllm-cuda"], "no selected backend boots vllm-cuda (backends=inf2)"),
    (["--account", A1, "--ami", SOURCE_AMI, "--image", "neuron"], "--ami and --image"),
    (["--account", A1, "--source-region", "zz-fake-9"], "zz-fake-9"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, words):
    w = World()
    rc, _ = run(w, argv, project(tmp_path, region=EAST, backends="inf2"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and words in err and "\n" not in err and w.clients == {}


@pytest.mark.parametrize("context, argv, named", [
    ({"region": EAST, "backends": "inf2"}, [], 'sets backends="inf2", region="us-east-1" in its "context"'),
    # the organizer's tuning, handed out: cdk.json's own value would win on every attendee's deploy
    ({}, ["-c", f"region={EAST}", "-c", "backends=inf2", "-c", "max_model_len=8192"], "max_model_len=4096"),
])
def test_a_handout_key_cdk_json_sets_is_refused_before_anything_changes(tmp_path, context, argv, named):
    """The CDK CLI reads cdk.json's context before cdk.context.json's (kit/regions.py cites the CLI's
    source), so a key set in both comes from cdk.json: the same value too is refused, since the
    file's would be dead and the next share or edit would part them."""
    w = kit_image_world()
    cdk = project(tmp_path, **context, **({"max_model_len": 4096} if "max_model_len=8192" in argv else {}))
    handout = tmp_path / "cdk.context.json"
    rc, out = run(w, ["--account", A1, "--write-context", str(handout), *argv], cdk)
    assert rc == 1
    line = out.strip()
    assert "\n" not in line and named in line and f"{tmp_path / 'cdk.json'} sets " in line
    assert line.endswith("run the share again; nothing was changed")
    assert w.changes() == [] and not handout.exists()


def test_a_key_known_only_after_the_plan_is_refused_before_the_file_is_written(tmp_path):
    """--ami: the backends that boot it come from its kit-image tag, read by the plan, so its
    <id>_ami is checked against cdk.json when the file is written."""
    from harness.account import image_share

    project(tmp_path, inf2_ami="ami-0fedcba9876543210")
    handout = tmp_path / "cdk.context.json"
    with pytest.raises(image_share.ShareError) as e:
        image_share.write_context(handout, {"region": EAST, "backends": "inf2", "inf2_region": EAST,
                                            "inf2_ami": SOURCE_AMI}, io.StringIO())
    assert 'sets inf2_ami="ami-0fedcba9876543210"' in str(e.value) and "nothing was written" in str(e.value)
    assert not handout.exists()
    # another file name is not read beneath cdk.json: written, with the note that CDK reads only cdk.context.json
    out = io.StringIO()
    image_share.write_context(tmp_path / "handout.json", {"region": EAST}, out)
    assert "read only under that name" in out.getvalue()


def test_the_kits_cdk_json_sets_no_key_of_the_kits_configuration():
    """So an organizer's handout (region, backends, <id>_region, <id>_ami and -c tuning such as
    max_model_len) is what every attendee's deploy reads; kit/config.py's defaults stand in."""
    from kit.config import KNOWN_KEYS
    from tests.stacks.conftest import CDK_CONTEXT

    assert sorted(set(CDK_CONTEXT) & set(KNOWN_KEYS)) == []


def test_a_share_over_an_earlier_handout_replaces_its_region(tmp_path):
    """Shared once for inf2 in us-west-2, its *_ami key deleted for the new share (docs/workshop.md),
    shared again in the kit's region: the file must not keep us-west-2 next to a us-east-1 AMI."""
    w = kit_image_world()
    cdk = project(tmp_path)
    handout = tmp_path / "cdk.context.json"
    handout.write_text(json.dumps({"region": EAST, "backends": "inf2", "inf2_region": WEST}))
    rc, out = run(w, ["--account", A1, "--write-context", str(handout), "-c", f"inf2_region={EAST}"], cdk)
    assert rc == 0, out
    assert json.loads(handout.read_text()) == {"region": EAST, "backends": "inf2", "inf2_region": EAST,
                                               "inf2_ami": SOURCE_AMI}
    assert regions.read_context(tmp_path / "cdk.json")["inf2_region"] == EAST


@pytest.mark.parametrize("state, fix", [
    ("Disabled", f"enable it: aws kms enable-key --key-id {key_arn(EAST)} --region {EAST}, then share again"),
    ("PendingDeletion", f"cancel its deletion, then enable it: aws kms cancel-key-deletion --key-id {key_arn(EAST)} "
                        f"--region {EAST} && aws kms enable-key --key-id {key_arn(EAST)} --region {EAST}, then share again"),
    ("PendingImport", f"see why: aws kms describe-key --key-id {key_arn(EAST)} --region {EAST}, then share again"),
])
def test_a_snapshot_key_that_is_not_enabled_is_refused_before_anything_changes(tmp_path, state, fix):
    """A launch decrypts the snapshot; a key Disabled or PendingDeletion cannot (KMS API Reference,
    DisableKey, ScheduleKeyDeletion): shared anyway, the attendees' image check would pass and their
    launch fail on the key."""
    w = kit_image_world()
    w.key_states[key_arn(EAST)] = state
    rc, out = run(w, ["--account", A1, "-c", f"region={EAST}", "-c", "backends=inf2"], project(tmp_path))
    assert rc == 1
    line = out.strip()
    assert "\n" not in line and f"whose KeyState is {state}, not Enabled" in line and line.endswith(fix)
    assert w.changes() == []
