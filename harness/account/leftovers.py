"""``python -m harness leftovers [--region R] [-c KEY=VALUE ...]`` (``make leftovers``): after
``cdk destroy --all``, what the kit made that still exists, in every configured region, with
what it costs per month and the command that removes it. Exit 1 while
anything still bills (or a check could not run, so nothing is proven), 0 when nothing bills;
things that cost nothing (Image Builder recipes, standard SSM parameters, a stack in
ROLLBACK_COMPLETE) are listed too, with their removal command, and do not change the exit code.

How the kit's things are found (each kind by its service's own list call, so a resource deleted a
moment ago is not reported from a stale index):
- the tag every stack applies, ``project=aws-inference-kit`` (stacks/wiring.py KIT_TAGS; the
  image distributions put it on AMIs, stacks/images.py), via the Resource Groups Tagging API
  (``GetResources`` with ``TagFilters``) for what no list call below covers, and as a filter of
  ``DescribeInstances``, ``DescribeVolumes`` (tags propagate to the root volume),
  ``DescribeImages``, ``DescribeSnapshots`` and ``DescribeStacks``;
- names: SageMaker endpoints ``SageMakerStack-*`` (``ListEndpoints`` NameContains); SSM parameters
  under ``/imagebuilder/inference-kit/`` and ``/inference-kit/`` (``DescribeParameters``, which
  also gives the tier); log groups ``/aws/imagebuilder/inference-kit-*``,
  ``/aws/imagebuilder/pipeline/inference-kit-*`` (created by Image Builder itself for pipeline
  runs, User Guide "Monitor Image Builder logs with Amazon CloudWatch Logs"),
  ``/aws/sagemaker/Endpoints/SageMakerStack*`` and the kit stacks' own (``<Stack>-*``); Image Builder
  pipelines, recipes, components, infrastructure and distribution configurations, lifecycle
  policies and images named ``inference-kit-*``; the package bucket
  ``inference-kit-packages-<account>-<region>`` (stacks/package.py);
- EventBridge Scheduler schedules (not taggable) by their target, ``aws-sdk:sagemaker:deleteEndpoint``
  or ``aws-sdk:ec2:stopInstances`` (stacks/guardrails.py), whose description or input names a kit stack;
- the Hugging Face token secret by its configured name: counted when it carries the kit's tag
  (the kit made it), otherwise shown as the user's;
- snapshots a bare ``aws ec2 deregister-image`` left behind: Image Builder tags what it makes
  ``CreatedBy: EC2 Image Builder`` and ``Ec2ImageBuilderArn: arn:...:image/<image name>/<version>/<build>``
  (Image Builder User Guide, "Tag Image Builder output resources", on output AMIs; the AWS managed
  policy EC2ImageBuilderLifecycleExecutionPolicy allows ``ec2:DeleteSnapshot`` only on snapshots
  tagged ``CreatedBy: EC2 Image Builder``, so its snapshots carry the tag too). The kit's image
  names are ``inference-kit-<image>-<key>`` (kit/image_facts.py pipeline_name). A kit snapshot
  (that tag, the kit's tag, or an AMI's) that no AMI of this account still maps
  (``DescribeImages`` filter ``block-device-mapping.snapshot-id``) is orphaned: it bills, and its
  removal is ``delete-snapshot``. The sharing copies ``python -m harness images share`` makes carry
  the kit's tag and ``kit-share`` (harness/account/touched.py share_tags) and are listed as such;
- the kit's KMS keys (each image stack's own, retained with the AMIs it encrypts when the stack
  goes: kit/image_facts.py): tagged ``project=aws-inference-kit`` (the tagging API) or named by an
  alias under ``alias/inference-kit/`` (``ListAliases``, KEY_ALIAS_PREFIX), each read with
  ``DescribeKey``; a key pending deletion is listed, free, with its deletion date. Its removal
  waits the longest window (KEY_PENDING_WINDOW_DAYS: a wait costs nothing).

Regions: the configuration's, plus every region ``harness.account.touched`` recorded (where a share copied
an image, or a build deployed an image stack and started its pipelines), so a copy, an image and a
retained key are not forgotten when the configuration no longer names their region.

SageMaker endpoint names are case-insensitive ("The name is case-insensitive in CreateEndpoint,
but the case is preserved": SageMaker API Reference, CreateEndpoint, EndpointName), and the
tagging API's ARN holds the name in lower case (``...:endpoint/sagemakerstack-...``), so one
endpoint is one name, compared case-insensitively, shown as ``ListEndpoints`` spells it.

Prices: instances and endpoints from harness.cost (Price List API with credentials, else the
dated snapshot); storage from harness/cost/storage_prices.py (EBS gp3 and snapshots, S3, Logs,
Secrets Manager, public IPv4, KMS keys), us-east-1 list prices, each with its source there. An
AMI itself costs nothing; its snapshots bill.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, TextIO

from harness.cost.storage_prices import HOURS_PER_MONTH, gb, monthly
from kit.cli import OneLineParser, one_line_errors
from kit.errors import UsageError

TAG_KEY, TAG_VALUE = "project", "aws-inference-kit"
LOG_PREFIXES = ("/aws/imagebuilder/inference-kit-", "/aws/imagebuilder/pipeline/inference-kit-",
                "/aws/sagemaker/Endpoints/SageMakerStack")
PARAMETER_PREFIXES = ("/imagebuilder/inference-kit/", "/inference-kit/")
IB_PREFIX = "inference-kit-"
TTL_TARGETS = ("aws-sdk:sagemaker:deleteEndpoint", "aws-sdk:ec2:stopInstances")
# The tags Image Builder puts on what it makes (Image Builder User Guide, "Tag Image Builder output
# resources"; see the module docstring for snapshots).
IB_CREATED_BY = ("CreatedBy", "EC2 Image Builder")
IB_ARN_TAG = "Ec2ImageBuilderArn"
SHARE_TAG = "kit-share"  # harness/account/touched.py SHARE_TAG_KEY: "<source AMI> <source region>"
# The AMI a snapshot was made for, named in its description by CreateImage ("Created by
# CreateImage(i-...) for ami-... [from vol-...]") and CopyImage ("Copied for DestinationAmi ami-...
# from SourceAmi ami-... for SourceSnapshot snap-..."; as seen in public AMI cost scripts, e.g. gist
# mvisonneau/80d378f8): only to name it; whether it still exists is asked of DescribeImages.
FOR_AMI = re.compile(r"\bfor (?:DestinationAmi )?(ami-[0-9a-f]+)")
# Image Builder image states of a build still under way (botocore's ImageStatus enum).
RUNNING_BUILD = {"PENDING", "CREATING", "BUILDING", "TESTING", "DISTRIBUTING", "INTEGRATING"}

ClientFor = Callable[[str, str], Any]
PriceFor = Callable[[str, str], "float | None"]


@dataclass
class Leftover:
    kind: str
    name: str
    detail: str
    usd_month: float | None  # None: unknown
    bills: bool
    remove: str


def _tags(items: Iterable[dict] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or []}


def _snapshot_ids(image: dict) -> list[str]:
    return [b["Ebs"]["SnapshotId"] for b in image.get("BlockDeviceMappings", []) if b.get("Ebs", {}).get("SnapshotId")]


def _pages(call: Callable[..., dict], key: str, token_in: str, token_out: str, **kw: Any) -> list:
    out: list = []
    while True:
        r = call(**kw)
        out += r.get(key, [])
        token = r.get(token_out)
        if not token:
            return out
        kw[token_in] = token


class Finder:
    """Every kind of leftover in one region."""

    def __init__(self, client: ClientFor, region: str, stack_names: Iterable[str], secret: str,
                 price: PriceFor, account: str):
        self.c, self.region, self.price, self.account = client, region, price, account
        self.stacks = tuple(sorted(set(stack_names), key=len, reverse=True))
        self.secret = secret
        self.found_ids: set[str] = set()
        self.errors: list[str] = []

    def r(self) -> str:
        return f"--region {self.region}"

    def kit_stack(self, text: str) -> str | None:
        return next((s for s in self.stacks if s in text), None)

    # -- CloudFormation ------------------------------------------------------------------------
    def cfn_stacks(self) -> list[Leftover]:
        cfn = self.c("cloudformation", self.region)
        out = []
        for st in _pages(cfn.describe_stacks, "Stacks", "NextToken", "NextToken"):
            if _tags(st.get("Tags")).get(TAG_KEY) != TAG_VALUE or st["StackStatus"] == "DELETE_COMPLETE":
                continue
            self.found_ids.add(st["StackName"])
            out.append(Leftover("stack", st["StackName"], st["StackStatus"], 0.0, False,
                                f"npx cdk destroy {st['StackName']} (or aws cloudformation delete-stack "
                                f"--stack-name {st['StackName']} {self.r()})"))
        return out

    # -- EC2 -----------------------------------------------------------------------------------
    def instances_and_volumes(self) -> list[Leftover]:
        ec2 = self.c("ec2", self.region)
        kit = [{"Name": f"tag:{TAG_KEY}", "Values": [TAG_VALUE]}]
        out, attached = [], set()
        for res in _pages(ec2.describe_instances, "Reservations", "NextToken", "NextToken",
                          Filters=kit + [{"Name": "instance-state-name",
                                          "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]}]):
            for i in res.get("Instances", []):
                iid, itype, state = i["InstanceId"], i["InstanceType"], i["State"]["Name"]
                self.found_ids.add(iid)
                attached |= {b["Ebs"]["VolumeId"] for b in i.get("BlockDeviceMappings", []) if b.get("Ebs")}
                stack = _tags(i.get("Tags")).get("aws:cloudformation:stack-name", "")
                running = state in ("pending", "running")
                if running:
                    rate = self.price(itype, self.region)
                    ip = monthly("public_ipv4", 1) if i.get("PublicIpAddress") else 0.0
                    cost = None if rate is None else rate * HOURS_PER_MONTH + ip
                    detail = f"{stack} {itype} {state}" + (", public IPv4" if ip else "")
                else:
                    cost, detail = 0.0, f"{stack} {itype} {state} (its volumes still bill)"
                out.append(Leftover("ec2 instance", iid, detail.strip(), cost, running,
                                    f"aws ec2 terminate-instances --instance-ids {iid} {self.r()}"))
        vols = {v["VolumeId"]: v for v in _pages(ec2.describe_volumes, "Volumes", "NextToken", "NextToken",
                                                 Filters=kit)}
        missing = sorted(attached - set(vols))
        if missing:
            vols.update({v["VolumeId"]: v for v in ec2.describe_volumes(VolumeIds=missing).get("Volumes", [])})
        for vid, v in sorted(vols.items()):
            self.found_ids.add(vid)
            size, vtype = v.get("Size", 0), v.get("VolumeType", "")
            cost = monthly("ebs_gp3", size) if vtype == "gp3" else None
            on = [a["InstanceId"] for a in v.get("Attachments", [])]
            remove = (f"goes with {on[0]} when it is terminated" if on and all(
                a.get("DeleteOnTermination") for a in v.get("Attachments", []))
                else f"aws ec2 delete-volume --volume-id {vid} {self.r()}")
            out.append(Leftover("ebs volume", vid, f"{size} GiB {vtype}" + (f" on {on[0]}" if on else ", detached"),
                                cost, True, remove))
        return out

    def images_and_snapshots(self) -> list[Leftover]:
        ec2 = self.c("ec2", self.region)
        amis = _pages(ec2.describe_images, "Images", "NextToken", "NextToken", Owners=["self"],
                      Filters=[{"Name": f"tag:{TAG_KEY}", "Values": [TAG_VALUE]}])
        out: list[Leftover] = []
        held: dict[str, str] = {}  # snapshot id -> the AMI that maps it
        for a in amis:
            sids = _snapshot_ids(a)
            held.update(dict.fromkeys(sids, a["ImageId"]))
            self.found_ids.add(a["ImageId"])
            tags = _tags(a.get("Tags"))
            deletes = "; ".join(f"aws ec2 delete-snapshot --snapshot-id {s} {self.r()}" for s in sids)
            what = tags.get("kit-image", a.get("Name", ""))
            if tags.get(SHARE_TAG):  # a copy ``harness.account.images share`` made: "<source AMI> <source region>"
                what = f"{what} (copy of {tags[SHARE_TAG]} made for a share)".strip()
            out.append(Leftover("ami", a["ImageId"], f"{what} {a.get('CreationDate', '')[:10]}", 0.0, False,
                                f"aws ec2 deregister-image --image-id {a['ImageId']} {self.r()}, then its snapshots"
                                + (f": {deletes}" if deletes else "")))
        snaps: dict[str, dict] = {}
        for filters in ([{"Name": f"tag:{TAG_KEY}", "Values": [TAG_VALUE]}],
                        [{"Name": f"tag:{IB_CREATED_BY[0]}", "Values": [IB_CREATED_BY[1]]}]):
            for sn in _pages(ec2.describe_snapshots, "Snapshots", "NextToken", "NextToken", OwnerIds=["self"],
                             Filters=filters):
                tags = _tags(sn.get("Tags"))
                if tags.get(TAG_KEY) == TAG_VALUE or f":image/{IB_PREFIX}" in tags.get(IB_ARN_TAG, ""):
                    snaps[sn["SnapshotId"]] = sn
        rest = sorted(set(held) - set(snaps))
        if rest:
            snaps.update({sn["SnapshotId"]: sn for sn in ec2.describe_snapshots(SnapshotIds=rest).get("Snapshots", [])})
        # A snapshot no kit AMI maps may still be another AMI's of this account (copied by hand,
        # tags not copied): only one that no AMI maps is orphaned.
        loose = sorted(set(snaps) - set(held))
        for i in range(0, len(loose), 200):  # filter values per call: kept well under the API's limits
            for a in _pages(ec2.describe_images, "Images", "NextToken", "NextToken", Owners=["self"],
                            Filters=[{"Name": "block-device-mapping.snapshot-id", "Values": loose[i:i + 200]}]):
                if a.get("State") != "deregistered":  # recently deregistered AMIs are still listed a while
                    held.update({sid: a["ImageId"] for sid in _snapshot_ids(a) if sid in snaps})
        for sid, sn in sorted(snaps.items()):
            self.found_ids.add(sid)
            size = gb(sn["FullSnapshotSizeInBytes"]) if sn.get("FullSnapshotSizeInBytes") is not None \
                else float(sn.get("VolumeSize", 0))
            if sid in held:
                out.append(Leftover("ebs snapshot", sid, f"{size:.1f} GB written, of {held[sid]}",
                                    monthly("ebs_snapshot", size), True,
                                    f"aws ec2 delete-snapshot --snapshot-id {sid} {self.r()} (after its AMI is "
                                    "deregistered)"))
                continue
            gone = FOR_AMI.search(sn.get("Description", ""))
            build = _tags(sn.get("Tags")).get(IB_ARN_TAG, "").split(":image/", 1)[-1]
            whose = gone.group(1) if gone else build or "its AMI"
            out.append(Leftover("orphaned snapshot", sid, f"{size:.1f} GB written; {whose} no longer exists "
                                "(deregistered without its snapshots)", monthly("ebs_snapshot", size), True,
                                f"aws ec2 delete-snapshot --snapshot-id {sid} {self.r()}"))
        return out

    # -- KMS -----------------------------------------------------------------------------------
    def kms_keys(self, tagged_arns: Iterable[str]) -> list[Leftover]:
        from kit.image_facts import KEY_ALIAS_PREFIX, KEY_PENDING_WINDOW_DAYS

        kms = self.c("kms", self.region)
        keys = {a.split(":key/", 1)[1]: "" for a in tagged_arns if ":kms:" in a and ":key/" in a}
        for al in _pages(kms.list_aliases, "Aliases", "Marker", "NextMarker"):
            if al.get("AliasName", "").startswith(KEY_ALIAS_PREFIX) and al.get("TargetKeyId"):
                keys[al["TargetKeyId"]] = al["AliasName"]
        out = []
        for key_id, alias in sorted(keys.items()):
            try:
                meta = kms.describe_key(KeyId=key_id)["KeyMetadata"]
            except Exception as exc:
                if "NotFoundException" in str(exc):  # deleted since the list
                    continue
                raise
            if meta.get("KeyManager") == "AWS":  # AWS managed keys are free and not the kit's to delete
                continue
            self.found_ids.add(key_id.lower())
            name = f"{key_id} ({alias})" if alias else key_id
            state = meta.get("KeyState", "")
            if state == "PendingDeletion":
                when = meta.get("DeletionDate")
                day = when.date().isoformat() if hasattr(when, "date") else str(when or "?")[:10]
                out.append(Leftover("kms key", name, f"pending deletion, deleted on {day}", 0.0, False,
                                    f"nothing: KMS deletes it on {day} (aws kms cancel-key-deletion --key-id "
                                    f"{key_id} {self.r()} keeps it)"))
                continue
            out.append(Leftover("kms key", name, f"{state or '?'}; each rotation of its material adds to the price",
                                monthly("kms_key", 1), True,
                                f"aws kms schedule-key-deletion --key-id {key_id} --pending-window-in-days {KEY_PENDING_WINDOW_DAYS} "
                                f"{self.r()} (once the AMIs and snapshots it encrypts are gone: what it "
                                "encrypts cannot be read after)"))
        return out

    # -- SageMaker -----------------------------------------------------------------------------
    def sagemaker(self, tagged_arns: Iterable[str]) -> list[Leftover]:
        sm = self.c("sagemaker", self.region)
        out = []
        # lower-cased name -> the name as shown: ListEndpoints' (case preserved) over the ARN's
        names: dict[str, str] = {}
        arns = list(tagged_arns)
        for a in arns:
            if ":endpoint/" in a:
                names.setdefault(a.split(":endpoint/", 1)[1].lower(), a.split(":endpoint/", 1)[1])
        for e in _pages(sm.list_endpoints, "Endpoints", "NextToken", "NextToken", NameContains="SageMakerStack"):
            names[e["EndpointName"].lower()] = e["EndpointName"]
        for name in sorted(names.values()):
            try:
                e = sm.describe_endpoint(EndpointName=name)
            except Exception as exc:
                if "Could not find" in str(exc) or "ValidationException" in str(exc):
                    continue
                raise
            self.found_ids.add(name.lower())
            cost = 0.0
            variants = e.get("ProductionVariants", [])
            try:
                cfg = sm.describe_endpoint_config(EndpointConfigName=e["EndpointConfigName"])
                variants = cfg.get("ProductionVariants", variants)
            except Exception:  # noqa: BLE001 - its config may be deleted already
                pass
            types = []
            for v in variants:
                itype, count = v.get("InstanceType"), v.get("InitialInstanceCount", v.get("CurrentInstanceCount", 1))
                rate = self.price(itype, self.region) if itype else None
                cost = None if rate is None or cost is None else cost + rate * HOURS_PER_MONTH * count
                types.append(f"{count} x {itype}")
            out.append(Leftover("sagemaker endpoint", name, f"{e.get('EndpointStatus')} {', '.join(types)}", cost, True,
                                f"aws sagemaker delete-endpoint --endpoint-name {name} {self.r()}"))
        for arn in sorted(arns):
            for kind, part, cmd in (("sagemaker endpoint config", ":endpoint-config/",
                                     "aws sagemaker delete-endpoint-config --endpoint-config-name"),
                                    ("sagemaker model", ":model/", "aws sagemaker delete-model --model-name")):
                if part not in arn:
                    continue
                name = arn.split(part, 1)[1]
                try:
                    (sm.describe_endpoint_config(EndpointConfigName=name) if "config" in kind
                     else sm.describe_model(ModelName=name))
                except Exception as exc:
                    if "Could not find" in str(exc) or "ValidationException" in str(exc):
                        continue
                    raise
                self.found_ids.add(name.lower())
                out.append(Leftover(kind, name, "no charge", 0.0, False, f"{cmd} {name} {self.r()}"))
        return out

    # -- S3 ------------------------------------------------------------------------------------
    def buckets(self, tagged_arns: Iterable[str]) -> list[Leftover]:
        s3 = self.c("s3", self.region)
        names = {a.split(":::", 1)[1] for a in tagged_arns if a.startswith("arn:aws:s3:::")}
        names.add(f"inference-kit-packages-{self.account}-{self.region}")
        out = []
        for name in sorted(names):
            try:
                objs = _pages(s3.list_objects_v2, "Contents", "ContinuationToken", "NextContinuationToken",
                              Bucket=name)
            except Exception as exc:
                if "NoSuchBucket" in str(exc):
                    continue
                raise
            self.found_ids.add(name)
            size = sum(o.get("Size", 0) for o in objs)
            out.append(Leftover("s3 bucket", name, f"{len(objs)} objects, {gb(size):.2f} GB",
                                monthly("s3_standard", gb(size)), size > 0,
                                f"aws s3 rb s3://{name} --force {self.r()}"))
        return out

    # -- SSM, Logs, Scheduler, Image Builder, Secrets Manager --------------------------------
    def parameters(self) -> list[Leftover]:
        ssm = self.c("ssm", self.region)
        out = []
        params = _pages(ssm.describe_parameters, "Parameters", "NextToken", "NextToken",
                        ParameterFilters=[{"Key": "Name", "Option": "BeginsWith", "Values": list(PARAMETER_PREFIXES)}])
        for p in params:
            advanced = p.get("Tier") == "Advanced"
            out.append(Leftover("ssm parameter", p["Name"], p.get("Tier", "Standard"),
                                monthly("ssm_advanced", 1) if advanced else 0.0, advanced,
                                f"aws ssm delete-parameter --name {p['Name']} {self.r()}"))
        return out

    def log_groups(self, tagged_arns: Iterable[str] = ()) -> list[Leftover]:
        logs = self.c("logs", self.region)
        seen: dict[str, dict] = {}
        # Tagged groups by their exact name (arn:aws:logs:<region>:<account>:log-group:<name>[:*]).
        named = tuple(a.split(":log-group:", 1)[1].removesuffix(":*") for a in tagged_arns if ":log-group:" in a)
        for prefix in LOG_PREFIXES + tuple(f"{s}-" for s in self.stacks) + tuple(f"/aws/lambda/{s}-" for s in self.stacks) + named:
            for g in _pages(logs.describe_log_groups, "logGroups", "nextToken", "nextToken", logGroupNamePrefix=prefix):
                seen[g["logGroupName"]] = g
        out = []
        for name, g in sorted(seen.items()):
            if named and name not in named and not name.startswith(LOG_PREFIXES + tuple(f"{s}-" for s in self.stacks)
                                                                   + tuple(f"/aws/lambda/{s}-" for s in self.stacks)):
                continue  # another group that merely starts with a tagged group's name
            self.found_ids.add(name)
            stored = g.get("storedBytes", 0)
            keep = f"{g['retentionInDays']} d" if g.get("retentionInDays") else "never expires"
            out.append(Leftover("log group", name, f"{gb(stored):.3f} GB stored, {keep}", monthly("logs_storage", gb(stored)),
                                stored > 0, f"aws logs delete-log-group --log-group-name {name} {self.r()}"))
        return out

    def schedules(self) -> list[Leftover]:
        sch = self.c("scheduler", self.region)
        out = []
        for s in _pages(sch.list_schedules, "Schedules", "NextToken", "NextToken"):
            if not s.get("Target", {}).get("Arn", "").endswith(TTL_TARGETS):
                continue
            full = sch.get_schedule(Name=s["Name"], GroupName=s.get("GroupName", "default"))
            text = full.get("Description", "") + full.get("Target", {}).get("Input", "")
            stack = self.kit_stack(text) or self.kit_stack(s["Name"])
            if not stack:
                continue
            out.append(Leftover("ttl schedule", s["Name"], f"{stack}: {full.get('Description', '')[:80]}", 0.0, False,
                                f"aws scheduler delete-schedule --name {s['Name']} --group-name "
                                f"{s.get('GroupName', 'default')} {self.r()}"))
        return out

    def imagebuilder(self) -> list[Leftover]:
        ib = self.c("imagebuilder", self.region)
        out = []
        kinds = (("image pipeline", "list_image_pipelines", "imagePipelineList", {}, "delete-image-pipeline --image-pipeline-arn"),
                 ("image recipe", "list_image_recipes", "imageRecipeSummaryList", {"owner": "Self"}, "delete-image-recipe --image-recipe-arn"),
                 ("ib component", "list_components", "componentVersionList", {"owner": "Self"}, "delete-component --component-build-version-arn"),
                 ("ib infrastructure", "list_infrastructure_configurations", "infrastructureConfigurationSummaryList", {},
                  "delete-infrastructure-configuration --infrastructure-configuration-arn"),
                 ("ib distribution", "list_distribution_configurations", "distributionConfigurationSummaryList", {},
                  "delete-distribution-configuration --distribution-configuration-arn"),
                 ("ib lifecycle policy", "list_lifecycle_policies", "lifecyclePolicySummaryList", {},
                  "delete-lifecycle-policy --lifecycle-policy-arn"))
        for kind, op, key, kw, cmd in kinds:
            for item in _pages(getattr(ib, op), key, "nextToken", "nextToken", **kw):
                if not item.get("name", "").startswith(IB_PREFIX):
                    continue
                arn = item["arn"]
                if kind == "ib component":  # a component version's build versions are what is deleted
                    arn = f"{arn}/1" if arn.count("/") == 2 else arn
                out.append(Leftover(kind, item["name"], "no charge", 0.0, False, f"aws imagebuilder {cmd} {arn} {self.r()}"))
        for version in _pages(ib.list_images, "imageVersionList", "nextToken", "nextToken", owner="Self"):
            if not version.get("name", "").startswith(IB_PREFIX):
                continue
            for b in _pages(ib.list_image_build_versions, "imageSummaryList", "nextToken", "nextToken",
                            imageVersionArn=version["arn"]):
                state = b.get("state", {}).get("status", "")
                if state in RUNNING_BUILD:  # its build or test instance bills until the build ends
                    out.append(Leftover("ib build running", f"{b['name']} {b['version']}", f"{state}: its instance "
                                        "bills until it ends", None, True,
                                        f"aws imagebuilder cancel-image-creation --image-build-version-arn {b['arn']} "
                                        f"{self.r()}"))
                    continue
                out.append(Leftover("ib image", f"{b['name']} {b['version']}", state,
                                    0.0, False, f"aws imagebuilder delete-image --image-build-version-arn {b['arn']} {self.r()}"))
        return out

    def token_secret(self) -> list[Leftover]:
        sm = self.c("secretsmanager", self.region)
        try:
            s = sm.describe_secret(SecretId=self.secret)
        except Exception as exc:
            if "ResourceNotFoundException" in str(exc):
                return []
            raise
        if s.get("DeletedDate"):
            return [Leftover("secret", self.secret, "scheduled for deletion", 0.0, False,
                             "nothing: Secrets Manager deletes it at the end of its recovery window")]
        ours = _tags(s.get("Tags")).get(TAG_KEY) == TAG_VALUE
        cost = monthly("secret", 1)
        return [Leftover("secret" if ours else "secret (yours)", self.secret,
                         "the kit made it" if ours else f"made outside the kit; ${cost:.2f}/month, not counted",
                         cost if ours else 0.0, ours,
                         f"aws secretsmanager delete-secret --secret-id {self.secret} {self.r()}")]

    def tagged_arns(self) -> list[tuple[str, dict[str, str]]]:
        tagging = self.c("resourcegroupstaggingapi", self.region)
        items = _pages(tagging.get_resources, "ResourceTagMappingList", "PaginationToken", "PaginationToken",
                       TagFilters=[{"Key": TAG_KEY, "Values": [TAG_VALUE]}])
        return [(i["ResourceARN"], _tags(i.get("Tags"))) for i in items]


def find(client: ClientFor, region: str, stack_names: Iterable[str], secret: str, price: PriceFor,
         account: str) -> tuple[list[Leftover], list[str]]:
    """Every leftover in ``region`` and the checks that could not run."""
    f = Finder(client, region, stack_names, secret, price, account)
    items: list[Leftover] = []
    errors: list[str] = []
    tagged: list[tuple[str, dict[str, str]]] = []

    def run(name: str, fn: Callable[[], list[Leftover]]) -> None:
        try:
            items.extend(fn())
        except Exception as exc:  # noqa: BLE001 - access denied, throttling: say which check, keep going
            errors.append(f"{name}: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}")

    try:
        tagged = f.tagged_arns()
    except Exception as exc:  # noqa: BLE001
        errors.append(f"tagging api: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}")
    arns = [a for a, _ in tagged]
    run("cloudformation", f.cfn_stacks)
    run("ec2 instances/volumes", f.instances_and_volumes)
    run("sagemaker", lambda: f.sagemaker(a for a in arns if ":sagemaker:" in a))
    run("amis/snapshots", f.images_and_snapshots)
    run("s3", lambda: f.buckets(a for a in arns if a.startswith("arn:aws:s3:::")))
    run("ssm parameters", f.parameters)
    run("log groups", lambda: f.log_groups(a for a in arns if ":log-group:" in a))
    run("scheduler", f.schedules)
    run("image builder", f.imagebuilder)
    run("token secret", f.token_secret)
    run("kms keys", lambda: f.kms_keys(a for a in arns if ":kms:" in a))
    # Tagged resources of a kind none of the calls above lists, whose stack is gone (a stack that
    # still exists removes them): named, unpriced, not counted.
    live_stacks = {i.name for i in items if i.kind == "stack"}
    known = {i.name.lower() for i in items} | {x.lower() for x in f.found_ids}
    covered = (":instance/", ":volume/", ":image/", ":snapshot/", ":sagemaker:", "arn:aws:s3:::", ":log-group:",
               ":imagebuilder:", ":secretsmanager:", ":stack/", ":parameter/", ":kms:")
    for arn, tags in tagged:
        if any(c in arn for c in covered) or arn.rsplit("/", 1)[-1].lower() in known:
            continue
        stack = tags.get("aws:cloudformation:stack-name", "")
        if stack in live_stacks:
            continue
        items.append(Leftover("tagged resource", arn, f"from {stack or 'no stack'}; price not known to the kit",
                              None, False, "see its service's console or CLI (its stack is gone)"))
    return items, errors


def render(region: str, items: list[Leftover], errors: list[str], out: TextIO) -> None:
    print(f"{region}: {len(items)} left" + (f", {len(errors)} check(s) could not run" if errors else ""), file=out)
    for i in items:
        cost = "?" if i.usd_month is None else "<$0.01" if 0 < i.usd_month < 0.005 else f"${i.usd_month:,.2f}"
        flag = "BILLS" if i.bills else "free " if i.usd_month == 0 else "     "
        print(f"  {flag} {i.kind:<26} {i.name}  ({i.detail})  {cost}/month\n        remove: {i.remove}", file=out)
    for e in errors:
        print(f"  could not check {e}", file=out)


def kit_stack_names(config: Any) -> list[str]:
    """Every stack name the kit may have made in any region (the catalog's, variants', shared ones)."""
    from kit import variants
    from kit.catalog import BACKENDS
    from kit.image_facts import IMAGE_STACKS

    names = {b.stack_name for b in BACKENDS.values()} | {variants.stack_name(bc.id, bc.variant) for bc in config.deployments}
    names |= {"NetworkStack", "PackageStack", *IMAGE_STACKS.values()}
    return sorted(names)


@one_line_errors("harness leftovers")
def main(argv: list[str] | None = None, *, client: ClientFor | None = None, price: PriceFor | None = None,
         account: str | None = None, out: TextIO = sys.stdout) -> int:
    p = OneLineParser(prog="python -m harness leftovers", description=__doc__.split("\n\n")[0])
    p.add_argument("--region", help="only this region (default: every region the configuration uses, and every "
                                    "region harness.account.touched recorded)")
    p.add_argument("--cdk-json", type=Path, default=None, help="default ./cdk.json")
    p.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    from kit.config import parse
    from kit.regions import check_region, read_context

    # bad input is one line and exit 2 at the door: a named file that is missing or broken names
    # it (JsonFileError, never the defaults), then ConfigError, RegionError
    ctx = read_context(a.cdk_json or Path("cdk.json"), required=a.cdk_json is not None)
    for o in a.context:
        k, sep, v = o.partition("=")
        if not sep or not k:
            raise UsageError(f"-c {o!r}: expected KEY=VALUE")
        ctx[k] = v
    config = parse(ctx)
    regions = [check_region("--region", a.region)] if a.region else list(config.regions)
    if client is None:
        import boto3

        client = lambda service, region: boto3.client(service, region_name=region)  # noqa: E731
    if price is None:
        from harness.cost.prices import PriceBook

        book = PriceBook.auto()
        price = lambda itype, region: book.instance(itype, region).usd_per_hour  # noqa: E731
    if account is None:
        try:
            account = client("sts", regions[0]).get_caller_identity()["Account"]
        except Exception as exc:  # noqa: BLE001 - no credentials: nothing can be checked
            print(f"harness leftovers: no usable AWS credentials: {(str(exc).splitlines() or [''])[0][:200]}", file=out)
            return 1
    if not a.region:  # where a share or a build made things, outside the configuration (harness/account/touched.py)
        from harness.account.touched import recorded_regions

        extra = [r for r in recorded_regions() if r not in regions]
        if extra:
            print(f"also {', '.join(extra)}: recorded by harness images build / share (harness/account/touched.py)",
                  file=out)
            regions += extra
    names = kit_stack_names(config)
    billing, total, failed, free, unknown = 0, 0.0, 0, 0, False
    for region in regions:
        items, errors = find(client, region, names, config.hf_token_secret, price, account)
        render(region, items, errors, out)
        failed += len(errors)
        for i in items:
            if i.bills:
                billing += 1
                total += i.usd_month or 0.0
                unknown = unknown or i.usd_month is None
            else:
                free += 1
    if billing:
        print(f"{billing} still bill{'s' if billing == 1 else ''}: ${total:,.2f}/month"
              f"{' or more (some prices unknown)' if unknown else ''}; remove them with the commands above", file=out)
    elif failed:
        print(f"nothing found that bills, but {failed} check(s) could not run: not proven", file=out)
    else:
        print(f"nothing bills in {', '.join(regions)}" + (f" ({free} free leftover{'s' if free != 1 else ''} listed)"
                                                          if free else ""), file=out)
    return 1 if billing or failed else 0


if __name__ == "__main__":
    sys.exit(main())
