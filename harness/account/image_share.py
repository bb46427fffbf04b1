"""``python -m harness images share``: the kit's images, usable by other accounts (a workshop's
attendees), and the context those accounts deploy with.

For every kit image the configuration boots (kit/image_needs.py: each selected EC2 backend's
image, in that backend's region), or only ``--image``'s, or one ``--ami``:

1. It finds the AMI where the backend boots: the image's SSM parameter in that region
   (``GetParameters``), else a copy an earlier share made there (``DescribeImages`` by its
   ``kit-share`` tag), else it plans a copy from a region where the image is published (every
   configured region, then ``--source-region``).
2. It checks everything before it changes anything: each AMI's snapshots (``DescribeImages``,
   ``DescribeSnapshots``) and their key (KMS ``DescribeKey``): a snapshot under the AWS managed
   key cannot be shared ("You can't share AMIs that are backed by snapshots that are encrypted
   with the default AWS managed key", EC2 User Guide, "Share an AMI with specific AWS
   accounts"), so it refuses in one line with the ``copy-image`` command that re-encrypts the
   image under the kit's key in the image's own region (``--region``: without it the CLI copies
   into its default region, where ``share --ami`` would find nothing). A copy needs the kit's
   key in the destination region (``alias/inference-kit/<image>``, the image stack's own,
   kit/image_facts.py key_alias, or ``-c image_kms_key`` when that key is there): none is one line.
3. Copies: ``CopyImage`` called in the destination region (``SourceRegion`` names the source),
   ``Encrypted`` under the destination's kit key, ``CopyImageTags`` (user-defined AMI tags are
   not copied by default, botocore ec2 CopyImage) and the share tags on the copy and its
   snapshots (harness/account/touched.py share_tags: ``project=aws-inference-kit`` and ``kit-share``), so
   ``harness.account.leftovers`` and ``images list`` find them. The region is recorded right after the
   call (harness/account/touched.py record_region), then the copy is waited for (EC2 waiter
   ``image_available``, with a longer limit than its 10 minutes: a copy of a 150 GB image across
   regions takes longer).
4. Sharing: launch permission (``ModifyImageAttribute`` ``LaunchPermission.Add``), volume creation
   from each snapshot (``ModifySnapshotAttribute`` ``createVolumePermission`` ``add``; the EC2 User
   Guide says a launch does not need it, "the system provides the instance access to the
   referenced EBS snapshots", but the attendee can then also copy the snapshot or make a volume of
   it) and one KMS grant per account on each snapshot key (``CreateGrant``, below).
5. It prints the context the attendees deploy with (the same for every account: a shared AMI
   keeps its id), and with ``--write-context PATH`` writes it as a JSON object the CDK CLI reads
   on its own when PATH is the project's ``cdk.context.json``. cdk.json's context comes first
   (kit/regions.py), so a key set there would hide the file's: share refuses, naming the key and
   the file, before it changes anything when the keys are known then, else before it writes.

The key: "When you share an encrypted snapshot, you must also share the customer managed key
used to encrypt the snapshot" (EBS User Guide, "Share the KMS key used to encrypt a shared Amazon
EBS snapshot"): kms:DescribeKey, CreateGrant, GenerateDataKey, GenerateDataKeyWithoutPlaintext,
ReEncrypt and Decrypt. A grant gives them without changing the key policy: its grantee "can
represent one or more identities in the same AWS account as the KMS key or in a different
account" (KMS Developer Guide, "Grants in AWS KMS"; KMS API Reference, CreateGrant
GranteePrincipal: "Valid principals include Amazon Web Services accounts"). Granted to the
account (``arn:aws:iam::<account>:root``), the grant plays the part a key-policy statement naming
the account would: the account's own IAM policies then decide which of its users and roles use it
("Allowing users in other accounts to use a KMS key": the key side says which accounts may, the
external account's IAM policy delegates to its principals). The attendee principal that uses the
key is the one that launches the instance: CloudFormation's execution role from ``cdk bootstrap``
(``EXEC_ROLE`` below), AdministratorAccess by default; one bootstrapped with narrower
``--cloudformation-execution-policies`` needs those kms actions on the key's ARN. Nothing else of
the attendee's uses it: "An encrypted snapshot that you do not own (for example, the AMI is shared
with you) is restored to a volume that is encrypted by your AWS account's default CMK" at launch
(EC2 User Guide, "Use encryption with EBS-backed AMIs", instance-launching scenarios;
awsdocs/amazon-ec2-user-guide doc_source/AMIEncryption.md at 87a80ab), so the instance's later
stops and starts do not touch it. The grant is
named ``inference-kit-share-<account>``: CreateGrant with the same name and parameters returns the
existing grant (KMS API Reference, CreateGrant Name), so a second share adds nothing. A new grant
can take a few minutes to reach all of KMS (eventual consistency, same page).

Grants are revoked with ``aws kms revoke-grant`` (``list-grants`` names them); launch permissions
with ``modify-image-attribute --launch-permission Remove=[{UserId=...}]`` (docs/workshop.md).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TextIO

from kit.errors import KitError

ACCOUNT = re.compile(r"^[0-9]{12}$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")  # kit/config.py _AMI_ID
# The KMS operations a shared snapshot's key must allow the other account (EBS User Guide, "Share
# the KMS key used to encrypt a shared Amazon EBS snapshot"; its ReEncrypt is the two grant
# operations ReEncryptFrom and ReEncryptTo, botocore kms GrantOperation).
SHARE_KEY_OPERATIONS = ("Decrypt", "DescribeKey", "CreateGrant", "GenerateDataKey", "GenerateDataKeyWithoutPlaintext",
                        "ReEncryptFrom", "ReEncryptTo")
# EC2's waiter ImageAvailable polls every 15 s, 40 times (botocore ec2 waiters-2.json): 10 minutes.
# A cross-region copy of a 100-150 GB image takes longer; 30 s x 240 = 2 hours.
COPY_WAIT = {"Delay": 30, "MaxAttempts": 240}
# Context keys the organizer's -c may set that shape what an attendee's deploy boots and runs; the
# ones only an image build reads (image_kms_key, image_az, neuron_parent_image) stay out.
BUILD_ONLY_KEYS = {"image_kms_key", "image_az", "neuron_parent_image"}
# Who uses a shared snapshot's key in the attendee's account: the instance is launched by
# CloudFormation with the execution role `cdk bootstrap` made (node_modules/aws-cdk/lib/api/bootstrap/
# bootstrap-template.yaml CloudFormationExecutionRole: RoleName cdk-${Qualifier}-cfn-exec-role-
# ${AWS::AccountId}-${AWS::Region}, AdministratorAccess unless --cloudformation-execution-policies
# names others; hnb659fds is the default qualifier). The actions are the EBS User Guide's list for a
# shared snapshot's key ("Share the KMS key used to encrypt a shared Amazon EBS snapshot").
EXEC_ROLE = "cdk-hnb659fds-cfn-exec-role-<account>-<region>"
LAUNCH_KEY_ACTIONS = ("kms:DescribeKey", "kms:CreateGrant", "kms:Decrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*")


class ShareError(KitError):
    """A refusal before anything changed (or a failure after), one line to print; exit 1."""

    exit_code = 1


@dataclass
class Target:
    """One image where attendees boot it."""

    image: str  # a kit image (IMAGE_PARAMETERS key), or "" for an --ami without a kit-image tag
    region: str
    backend_ids: tuple[str, ...]
    ami: str | None = None  # the AMI there: published, given, or a copy found / made
    how: str = ""  # "published", "--ami", "copy"
    source: tuple[str, str] | None = None  # (AMI, region) a copy is made of
    copy_key: str | None = None  # the destination key a copy is encrypted under
    snapshots: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # customer managed key ARNs of its snapshots


def _tags(image: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in image.get("Tags", [])}


def _snapshot_ids(image: dict) -> list[str]:
    return [b["Ebs"]["SnapshotId"] for b in image.get("BlockDeviceMappings", []) if b.get("Ebs", {}).get("SnapshotId")]


def _published(ssm: Any, parameter: str) -> str | None:
    r = ssm.get_parameters(Names=[parameter])
    return next((p["Value"] for p in r.get("Parameters", []) if p["Name"] == parameter), None)


def _error_code(e: Exception) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


def _image(ec2: Any, ami: str) -> dict | None:
    from botocore.exceptions import ClientError

    try:
        found = ec2.describe_images(ImageIds=[ami]).get("Images", [])
    except ClientError as e:  # InvalidAMIID.NotFound (EC2 API Reference, error codes): not there
        if _error_code(e).startswith("InvalidAMIID"):
            return None
        raise
    return found[0] if found else None


def _existing_copy(ec2: Any, source: tuple[str, str]) -> dict | None:
    """A copy an earlier share made of ``source`` (its kit-share tag), available first."""
    from harness.account.touched import SHARE_TAG_KEY

    found = ec2.describe_images(Owners=["self"], Filters=[
        {"Name": f"tag:{SHARE_TAG_KEY}", "Values": [f"{source[0]} {source[1]}"]}]).get("Images", [])
    usable = [i for i in found if i.get("State") in ("available", "pending")]
    return sorted(usable, key=lambda i: (i.get("State") != "available", i.get("CreationDate", "")))[0] if usable else None


def _kit_key(kms: Any, image: str, region: str, given: str | None) -> str | None:
    """The customer managed key a copy into ``region`` is encrypted under: ``-c image_kms_key``
    when it is a key in that region, else the image stack's own (its alias), else None."""
    from botocore.exceptions import ClientError

    from kit.image_facts import key_alias

    if given and given.split(":")[3:4] == [region]:
        return given
    try:
        meta = kms.describe_key(KeyId=key_alias(image))["KeyMetadata"]
    except ClientError as e:  # NotFoundException (KMS API Reference, DescribeKey): no image stack there
        if _error_code(e) == "NotFoundException":
            return None
        raise
    if meta.get("KeyManager") != "CUSTOMER" or meta.get("KeyState", "Enabled") != "Enabled":
        return None
    return meta["Arn"]


def _copy_command(ami: str, region: str, image: str, name: str) -> str:
    from kit.image_facts import key_alias

    key = key_alias(image) if image else "<customer managed key ARN in " + region + ">"
    return (f"aws ec2 copy-image --source-image-id {ami} --source-region {region} --region {region} "
            f"--name {name}-cmk --encrypted --kms-key-id {key} --copy-image-tags")


def _key_state_fix(arn: str, state: str, region: str) -> str:
    """What makes a key usable again, by its KeyState (botocore kms KeyState: Creating | Enabled |
    Disabled | PendingDeletion | PendingImport | PendingReplicaDeletion | Unavailable | Updating).
    A canceled deletion leaves the key Disabled: "When this operation succeeds, the key state of
    the KMS key is Disabled. To enable the KMS key, use EnableKey" (KMS API Reference,
    CancelKeyDeletion)."""
    enable = f"aws kms enable-key --key-id {arn} --region {region}"
    if state == "Disabled":
        return f"enable it: {enable}"
    if state == "PendingDeletion":
        return f"cancel its deletion, then enable it: aws kms cancel-key-deletion --key-id {arn} --region {region} && {enable}"
    return f"see why: aws kms describe-key --key-id {arn} --region {region}"


def check_keys(aws: Any, t: Target, image: dict, done: str = "nothing was changed") -> None:
    """Fill ``t.snapshots`` and ``t.keys``; ShareError on a snapshot under the AWS managed key, or
    under a key that is not ``Enabled``: a launch must decrypt the snapshot, and a key pending
    deletion "can't be used in any cryptographic operations" (KMS API Reference,
    ScheduleKeyDeletion), a disabled one neither ("prevents use of the KMS key for cryptographic
    operations", DisableKey), so the attendees' deploys would pass the image check and then fail
    on the key (``done``: what the refusal says was changed so far)."""
    ec2, kms = aws.client("ec2", t.region), aws.client("kms", t.region)
    t.snapshots = _snapshot_ids(image)
    snaps = ec2.describe_snapshots(SnapshotIds=t.snapshots).get("Snapshots", []) if t.snapshots else []
    for s in snaps:
        if not (s.get("Encrypted") and s.get("KmsKeyId")):
            continue
        meta = kms.describe_key(KeyId=s["KmsKeyId"])["KeyMetadata"]
        if meta.get("KeyManager") == "AWS":
            from kit.image_facts import IMAGE_STACKS, key_alias

            stack = IMAGE_STACKS.get(t.image, "")
            whose = (f" ({key_alias(t.image)} is the image stack's own key, there once {stack} is deployed in "
                     f"{t.region})" if t.image else "")
            raise ShareError(
                f"{t.ami} ({t.image or 'given with --ami'}, {t.region}): snapshot {s['SnapshotId']} is encrypted "
                "with the AWS managed key aws/ebs, which cannot be shared (EC2 User Guide, 'Share an AMI with "
                f"specific AWS accounts'); {done}. Copy it under a customer managed key in its region: "
                f"{_copy_command(t.ami or '', t.region, t.image, image.get('Name', 'inference-kit-image'))}{whose}, "
                f"then share the copy: python -m harness images share --account <ids> --ami <the copy's id> "
                f"--region {t.region}")
        arn = meta.get("Arn", s["KmsKeyId"])
        state = meta.get("KeyState", "Enabled")
        if state != "Enabled":
            raise ShareError(
                f"{t.ami} ({t.image or 'given with --ami'}, {t.region}): snapshot {s['SnapshotId']} is encrypted "
                f"with {arn}, whose KeyState is {state}, not Enabled, so no account could launch the image; "
                f"{done}; {_key_state_fix(arn, state, t.region)}, then share again")
        if arn not in t.keys:
            t.keys.append(arn)


def plan(aws: Any, targets: list[Target], source_regions: Iterable[str], given_key: str | None,
         parameters: dict[str, str]) -> list[Target]:
    """Read-only: where each target's AMI is, what must be copied, and every refusal."""
    sources = list(dict.fromkeys(source_regions))
    for t in targets:
        if t.ami is None:  # a kit image, by its parameter
            t.ami = _published(aws.client("ssm", t.region), parameters[t.image])
            t.how = "published" if t.ami else ""
        if t.ami is None:
            for r in [r for r in sources if r != t.region]:
                ami = _published(aws.client("ssm", r), parameters[t.image])
                if ami:
                    t.source = (ami, r)
                    break
            if t.source is None:
                looked = ", ".join([t.region, *[r for r in sources if r != t.region]])
                raise ShareError(f"{t.image} is not published in {looked} ({parameters[t.image]}); nothing was "
                                 f"changed. Build it where {', '.join(t.backend_ids)} boots it: python -m harness images "
                                 f"build {t.image} --region {t.region} (or name the region it was built in: "
                                 "--source-region R)")
            copy = _existing_copy(aws.client("ec2", t.region), t.source)
            if copy is not None:
                t.ami, t.how = copy["ImageId"], "copy"
                if copy.get("State") != "available":
                    continue  # its snapshots are checked once it is available (share_all)
            else:
                src = _image(aws.client("ec2", t.source[1]), t.source[0])
                if src is None or src.get("State") != "available":
                    raise ShareError(f"{t.source[0]} ({t.image}, published in {t.source[1]}) is "
                                     f"{'missing' if src is None else src.get('State')}; nothing was changed")
                t.copy_key = _kit_key(aws.client("kms", t.region), t.image, t.region, given_key)
                if t.copy_key is None:
                    from kit.image_facts import IMAGE_STACKS, key_alias

                    raise ShareError(
                        f"{t.image} is published in {t.source[1]}, not in {t.region} where "
                        f"{', '.join(t.backend_ids)} boots it, and {t.region} has no customer managed key of the kit "
                        f"to copy it under ({key_alias(t.image)} not found); nothing was changed. Deploy the image "
                        f"stack there ({IMAGE_STACKS[t.image]}-{t.region}: npx cdk deploy {IMAGE_STACKS[t.image]}-"
                        f"{t.region}, with the same -c), or give a key of {t.region}: -c image_kms_key=<key ARN>")
                t.how = "copy"
                continue
        image = _image(aws.client("ec2", t.region), t.ami)
        if image is None:
            raise ShareError(f"{t.ami} ({t.image or '--ami'}) does not exist in {t.region}; nothing was changed")
        if not t.image:
            tagged = _tags(image).get("kit-image", "")
            t.image = tagged if tagged in parameters else ""
        check_keys(aws, t, image)
    return targets


def _copy(aws: Any, t: Target, out: TextIO) -> None:
    from harness.account import touched

    assert t.source is not None and t.copy_key is not None
    src_ami, src_region = t.source
    ec2 = aws.client("ec2", t.region)
    source = _image(aws.client("ec2", src_region), src_ami) or {}
    has = _tags(source)
    share_tags = touched.share_tags(src_ami, src_region)
    # CopyImageTags brings the source's tags (the kit's among them); a key the source already has
    # with the same value is left out of TagSpecifications, so no key is given twice.
    image_tags = [tg for tg in share_tags if has.get(tg["Key"]) != tg["Value"]]
    name = f"{source.get('Name', t.image)}-from-{src_region}"[:128]
    r = ec2.copy_image(SourceImageId=src_ami, SourceRegion=src_region, Name=name,
                       Description=f"copy of {src_ami} ({t.image}) from {src_region}, made by harness images share",
                       Encrypted=True, KmsKeyId=t.copy_key, CopyImageTags=True,
                       TagSpecifications=[{"ResourceType": "image", "Tags": image_tags},
                                          {"ResourceType": "snapshot", "Tags": share_tags}])
    t.ami = r["ImageId"]
    touched.record_region(t.region, f"{t.ami}: copy of {src_ami} ({t.image}) from {src_region} for a share")
    print(f"copying {src_ami} ({t.image}) from {src_region} to {t.region} as {t.ami} under {t.copy_key}; "
          f"waiting until it is available (up to {COPY_WAIT['Delay'] * COPY_WAIT['MaxAttempts'] // 60} minutes)",
          file=out, flush=True)


def _wait(aws: Any, t: Target, out: TextIO) -> dict:
    from botocore.exceptions import WaiterError

    ec2 = aws.client("ec2", t.region)
    try:
        ec2.get_waiter("image_available").wait(ImageIds=[t.ami], WaiterConfig=COPY_WAIT)
    except WaiterError as e:
        images = (e.last_response or {}).get("Images") or [{}]
        why = images[0].get("StateReason", {}).get("Message") or str(e)
        raise ShareError(f"{t.ami} ({t.image}, {t.region}) did not become available ({why}); nothing was shared; "
                         f"it is recorded for python -m harness leftovers; see it: aws ec2 describe-images --image-ids {t.ami} --region {t.region}; "
                         f"remove it: aws ec2 deregister-image --image-id {t.ami} --region {t.region} "
                         "(then its snapshots; python -m harness leftovers lists them)") from None
    except KeyboardInterrupt:
        print(f"\ninterrupted: the copy {t.ami} goes on in {t.region} (its snapshots bill once it is made); run the "
              "same share again to wait for it and share it (it is found by its kit-share tag)", file=out)
        raise
    image = _image(ec2, t.ami)
    if image is None:
        raise ShareError(f"{t.ami} ({t.region}) vanished after it became available; nothing was shared")
    return image


def share_all(aws: Any, accounts: list[str], targets: list[Target], out: TextIO) -> None:
    """Copies where planned, then launch permission, snapshot permission and key grants."""
    for t in targets:
        if t.ami is None:
            _copy(aws, t, out)
        if t.how == "copy" and not t.snapshots:
            check_keys(aws, t, _wait(aws, t, out), done="nothing was shared")  # under the kit's key: no refusal expected
    grants: dict[tuple[str, str], list[str]] = {}  # (region, key ARN) -> AMIs
    for t in targets:
        ec2 = aws.client("ec2", t.region)
        ec2.modify_image_attribute(ImageId=t.ami, LaunchPermission={"Add": [{"UserId": a} for a in accounts]})
        for sid in t.snapshots:
            ec2.modify_snapshot_attribute(SnapshotId=sid, Attribute="createVolumePermission",
                                          OperationType="add", UserIds=list(accounts))
        print(f"shared {t.ami} ({t.image or 'given with --ami'}, {t.region}, {t.how}) and {len(t.snapshots)} "
              f"snapshot{'s' if len(t.snapshots) != 1 else ''} with {', '.join(accounts)}", file=out)
        for k in t.keys:
            grants.setdefault((t.region, k), []).append(t.ami or "")
    for (region, key_arn), amis in grants.items():
        kms = aws.client("kms", region)
        partition = key_arn.split(":")[1] if key_arn.startswith("arn:") else "aws"
        for account in accounts:
            kms.create_grant(KeyId=key_arn, GranteePrincipal=f"arn:{partition}:iam::{account}:root",
                             Operations=list(SHARE_KEY_OPERATIONS), Name=f"inference-kit-share-{account}")
        print(f"granted {', '.join(accounts)} the use of {key_arn} (the snapshots' key of {', '.join(amis)}): "
              f"{', '.join(SHARE_KEY_OPERATIONS)}", file=out)


def attendee_context(targets: list[Target], kit_region: str, overrides: dict[str, str]) -> dict[str, str]:
    """What an attendee's deploy needs: the region, the backends that boot the shared images,
    each one's region and AMI, and the organizer's -c settings that shape the deployment (not the
    build-only ones). ``<id>_region`` is written even where it is the kit's region: written over an
    earlier handout, the file must not keep a region the AMI is not in."""
    from kit.catalog import BACKEND_IDS

    amis: dict[str, tuple[str, str]] = {}  # backend id -> (AMI, region)
    for t in targets:
        for bid in t.backend_ids:
            amis.setdefault(bid, (t.ami or "", t.region))
    ctx: dict[str, str] = {k: v for k, v in overrides.items() if k not in BUILD_ONLY_KEYS}
    ctx["region"] = kit_region
    ctx["backends"] = ",".join(b for b in BACKEND_IDS if b in amis)
    for bid in BACKEND_IDS:
        if bid in amis:
            ami, region = amis[bid]
            ctx[f"{bid}_region"] = region
            ctx[f"{bid}_ami"] = ami
    return ctx


def print_context(accounts: list[str], ctx: dict[str, str], targets: list[Target], out: TextIO) -> None:
    from kit.catalog import BACKENDS

    stacks = [BACKENDS[b].stack_name for b in ctx["backends"].split(",") if b]
    flags = " ".join(f"-c {k}={v}" for k, v in ctx.items())
    for account in accounts:
        print(f"attendee (account {account}): npx cdk deploy {' '.join(stacks)} {flags}", file=out)
    keys = sorted({k for t in targets for k in t.keys})
    if not keys:
        print("the context is the same for every account (a shared AMI keeps its id); its snapshots are "
              "unencrypted, so no key is used", file=out)
        return
    print(f"the context is the same for every account (a shared AMI keeps its id); the instance launch uses "
          f"{', '.join(keys)} through the grant, as the attendee account's CloudFormation execution role from "
          f"cdk bootstrap ({EXEC_ROLE}): it needs {', '.join(LAUNCH_KEY_ACTIONS)} on the key (the default "
          "bootstrap's AdministratorAccess has them; a narrower --cloudformation-execution-policies must "
          "include them); the root volume is re-encrypted under the attendee's default EBS key at launch, so "
          "nothing else of the attendee's uses this key", file=out)


def context_keys(targets: list[Target], overrides: dict[str, str]) -> set[str]:
    """The keys ``attendee_context`` will write for ``targets`` known before the plan (an --ami
    target's backends are known only after it)."""
    return {"region", "backends", *(k for k in overrides if k not in BUILD_ONLY_KEYS),
            *(f"{b}_{what}" for t in targets for b in t.backend_ids for what in ("region", "ami"))}


def shadowed(path: Path, keys: Iterable[str]) -> tuple[Path, dict[str, Any]]:
    """The cdk.json next to ``path`` and the ones of ``keys`` its context sets, when ``path`` is
    that project's cdk.context.json: the CDK CLI takes a key from cdk.json's context before
    cdk.context.json's (kit/regions.py), so the file's value of each would never be read. A
    cdk.json that cannot be read hides nothing here (the CLI refuses it on its own)."""
    from kit.jsonfile import JsonFileError, read_object

    cdk_json = path.parent / "cdk.json"
    if path.name != "cdk.context.json" or not cdk_json.exists():
        return cdk_json, {}
    try:
        context = read_object(cdk_json).get("context") or {}
    except JsonFileError:
        return cdk_json, {}
    if not isinstance(context, dict):
        return cdk_json, {}
    return cdk_json, {k: context[k] for k in sorted(set(keys)) if k in context}


def check_not_shadowed(path: Path, keys: Iterable[str], done: str) -> None:
    """ShareError, one line naming each key and the cdk.json that sets it, when ``path`` would be
    read beneath it (``done``: what the refusal says was changed so far). A key set there to the
    same value is refused too: the file's own value would still be dead, and the next share or
    edit of either file would part them without a word."""
    cdk_json, hidden = shadowed(path, keys)
    if hidden:
        them, values = ("it", "value") if len(hidden) == 1 else ("them", "values")
        raise ShareError(
            f"--write-context {path}: {cdk_json} sets {', '.join(f'{k}={json.dumps(v)}' for k, v in hidden.items())} "
            f"in its \"context\", and the CDK CLI reads cdk.json's context before cdk.context.json's, so every "
            f"attendee would deploy with cdk.json's {values}, not the file's; remove {them} from {cdk_json} "
            f"(cdk.context.json carries {them}) and run the share again; {done}")


def write_context(path: Path, ctx: dict[str, str], out: TextIO) -> None:
    """Write ``ctx`` into ``path`` (a JSON object, keys already there kept unless ``ctx`` sets
    them), atomically; ShareError instead when the cdk.json next to it sets one of its keys
    (``check_not_shadowed``)."""
    from kit.jsonfile import JsonFileError, read_object

    check_not_shadowed(path, ctx, "the shares are made, the context is printed above; nothing was written")
    old: dict[str, Any] = {}
    if os.path.lexists(path):
        try:
            old = read_object(path, label="--write-context")
        except JsonFileError as e:
            raise ShareError(f"{e}; not overwritten: move it away or name another file") from None
    merged = {**old, **ctx}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(merged, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise ShareError(f"--write-context {path}: cannot write ({e.strerror or type(e).__name__}); the shares are "
                         "made, the context is printed above") from None
    print(f"wrote {len(ctx)} context values to {path}" + (f" (kept {len(old.keys() - ctx.keys())} others)" if old else ""),
          file=out)
    if path.name != "cdk.context.json":
        print(f"note: the CDK CLI reads context from cdk.context.json in the project folder; {path.name} is "
              "read only under that name", file=out)
