"""The kit's machine images as a command:

    python -m harness images build IMAGE [--region R] [--no-deploy]   start the pipelines, follow to the end
    python -m harness images status [--region R]                      builds running now
    python -m harness images list [--region R]                        the kit's AMIs, snapshots, $/month
    python -m harness images share --account ID[,ID...] [--image IMAGE | --ami AMI] [--region R]
                                   [--source-region R] [--write-context cdk.context.json]

IMAGE is one of the kit's images (kit image facts: vllm-cuda, vllm-sm75, neuron, ...). Context
comes from cdk.json plus ``-c KEY=VALUE`` as for ``cdk deploy``; the region is the kit's
(``--region``, else context ``region``), never the shell's.

``build`` finds each pipeline of the image by name (``ListImagePipelines`` with a ``name``
filter; the names are ``inference-kit-<image>-<key>``, stacks/images.py), deploys the image
stack first when it is missing (``npx cdk deploy <ImageStack>``, unless ``--no-deploy``), starts
it (``StartImagePipelineExecution`` with the pipeline's lifecycle tags, kit/image_facts.py
lifecycle_tags, so its lifecycle policy deletes the build once newer ones replace it; it returns
the ``imageBuildVersionArn``; by hand: ``aws imagebuilder start-image-pipeline-execution
--image-pipeline-arn <arn> --tags kit-lifecycle=inference-kit-<image>-<key> --region R``) and follows it
with ``GetImage`` (state ``PENDING`` ... ``AVAILABLE`` | ``FAILED`` | ``CANCELLED``),
``ListWorkflowExecutions`` and ``ListWorkflowStepExecutions`` (the step that runs now, and the
build and test instances: a ``LaunchInstance`` step's outputs name the ``instanceId``,
``DescribeInstances`` its type). Shapes: the AWS CLI's examples (aws/aws-cli
awscli/examples/imagebuilder/*.rst) and botocore's model, which the tests validate against.
Before it deploys the stack or starts a build it records the region (harness/account/touched.py),
so ``python -m harness leftovers`` looks there after the configuration stops naming it.

The cost so far is each build/test instance's on-demand price (harness.cost: the Price List API
with credentials, else the dated snapshot; "unknown" when neither has the type) times the hours
from its launch step's start to its terminate step's end (or now); an estimate: EBS, data and
the seconds between steps are left out.

On failure it prints Image Builder's reason ("Workflow Execution ID: wf-... failed with reason:
...", Image Builder User Guide, Troubleshoot), each failed step with its message, and the tail of
the build log in CloudWatch Logs, group ``/aws/imagebuilder/<image name>``, stream
``<image version>/<build version>`` (User Guide, "Monitor Image Builder logs with Amazon
CloudWatch Logs"; the log is uploaded when the build ends), and exits 1.

``list`` reads the AMIs the kit's distribution tags (``project=aws-inference-kit``,
stacks/images.py) with ``DescribeImages`` and their snapshots with ``DescribeSnapshots``; a
snapshot's monthly cost is its ``FullSnapshotSizeInBytes`` (all written blocks: an upper bound of
the incremental size billed) at the EBS snapshot price (harness/cost/storage_prices.py).

``share`` (harness/account/image_share.py says how, with its sources) makes the kit's images launchable
by other accounts, a workshop's attendees: every kit image the configuration boots, in the
region of each backend that boots it (copied there under the kit's key when it was built
elsewhere), or ``--image``'s, or one ``--ami``: launch permission, snapshot permission and a KMS
grant per account on the snapshots' customer managed key, all checked first (an AMI under the
AWS managed ``aws/ebs`` key is refused with the ``copy-image`` command that fixes it). It prints
the context the attendees deploy with and ``--write-context`` writes it where ``cdk deploy``
reads it (docs/workshop.md).

Ctrl-C while ``build`` follows a build stops the following, not the build: it prints the
build's ARN, that its instance bills until it ends, and the ``cancel-image-creation`` command
(exit 130).

Exit codes: 0 done, 1 a build failed / something refused, 2 bad input, 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, TextIO

from harness.cost.storage_prices import PRICES as STORAGE_PRICES, gb, monthly
from kit.cli import OneLineParser, one_line_errors
from kit.errors import KitError

TAG_KEY, TAG_VALUE = "project", "aws-inference-kit"  # stacks.wiring KIT_TAGS, the distribution's AmiTags
OK_STATES = {"AVAILABLE"}
FAILED_STATES = {"CANCELLED", "FAILED", "DEPRECATED", "DELETED", "DISABLED"}
LOG_TAIL_LINES = 30
HEARTBEAT_S = 600  # a line at least this often while a build runs, even when nothing changed

ClientFor = Callable[[str, str], Any]  # (service, region) -> boto3 client
PriceFor = Callable[[str, str], "float | None"]  # (instance type, region) -> $/h


class ImagesError(KitError):
    """A refusal with one line to print (exit 1)."""

    exit_code = 1


@dataclass
class Aws:
    """What the commands touch, injectable for tests."""

    client: ClientFor
    price: PriceFor
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    # Where the regions the kit makes things in are remembered for leftovers
    # (harness/account/touched.py record_region, which ``main`` passes); None: not recorded.
    record_region: Callable[[str, str], None] | None = None


def image_facts():
    from kit import image_facts

    return image_facts


def pipeline_keys(image: str) -> list[str]:
    return list(image_facts().BUILD_HOSTS[image])


def published_parameter(image: str, key: str) -> str:
    """Where a pipeline publishes: the sm_75 build its candidate, every last pipeline the image's."""
    f = image_facts()
    keys = pipeline_keys(image)
    return f.IMAGE_PARAMETERS[image] if key == keys[-1] else f.SM75_CANDIDATE_PARAMETER


def find_pipeline(ib: Any, name: str) -> str | None:
    r = ib.list_image_pipelines(filters=[{"name": "name", "values": [name]}])
    return next((p["arn"] for p in r.get("imagePipelineList", []) if p.get("name") == name), None)


# -- following one build ----------------------------------------------------------------------

@dataclass
class Progress:
    status: str
    workflow: str = ""  # BUILD | TEST | DISTRIBUTION
    step: str = ""
    step_status: str = ""
    instances: list[tuple[str, datetime, datetime | None]] = field(default_factory=list)  # id, start, end
    failed_steps: list[tuple[str, str]] = field(default_factory=list)  # (name, message)


def _ts(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def progress(ib: Any, version_arn: str, image: dict) -> Progress:
    """Where the build is: its state, the step running now (else the last one), its instances."""
    p = Progress(image["state"]["status"])
    runs = ib.list_workflow_executions(imageBuildVersionArn=version_arn).get("workflowExecutions", [])
    for run in sorted(runs, key=lambda r: str(r.get("startTime", ""))):
        steps = ib.list_workflow_step_executions(workflowExecutionId=run["workflowExecutionId"]).get("steps", [])
        for s in steps:
            if s.get("status") in ("RUNNING", "COMPLETED", "FAILED"):
                p.workflow, p.step, p.step_status = run.get("type", ""), s.get("name", ""), s.get("status", "")
            if s.get("status") == "FAILED":
                p.failed_steps.append((s.get("name", ""), s.get("message", "")))
            if s.get("action") == "LaunchInstance" and s.get("outputs"):
                iid = json.loads(s["outputs"]).get("instanceId")
                if iid:
                    p.instances.append((iid, _ts(s.get("startTime")), None))
            if s.get("action") == "TerminateInstance" and s.get("endTime"):  # inputs: {"instanceId": ...}
                for i, (iid, start, _) in enumerate(p.instances):
                    if iid in (s.get("inputs") or ""):
                        p.instances[i] = (iid, start, _ts(s["endTime"]))
        if any(s.get("status") == "RUNNING" for s in steps):
            run_step = next(s for s in steps if s.get("status") == "RUNNING")
            p.workflow, p.step, p.step_status = run.get("type", ""), run_step["name"], "RUNNING"
    return p


class Coster:
    """Estimated $ so far of a build's instances: type (DescribeInstances, cached) x hours."""

    def __init__(self, ec2: Any, region: str, price: PriceFor, fallback_type: str):
        self.ec2, self.region, self.price, self.fallback = ec2, region, price, fallback_type
        self.types: dict[str, str] = {}

    def type_of(self, iid: str) -> str:
        if iid not in self.types:
            try:
                r = self.ec2.describe_instances(InstanceIds=[iid])
                self.types[iid] = r["Reservations"][0]["Instances"][0]["InstanceType"]
            except Exception:  # noqa: BLE001 - terminated long ago: assume the pipeline's first type
                self.types[iid] = self.fallback
        return self.types[iid]

    def so_far(self, p: Progress, now: datetime) -> tuple[float | None, str]:
        total, parts = 0.0, []
        for iid, start, end in p.instances:
            if start is None:
                continue
            itype = self.type_of(iid)
            rate = self.price(itype, self.region)
            if rate is None:
                return None, f"no price for {itype}"
            total += rate * max(0.0, ((end or now) - start).total_seconds()) / 3600
            parts.append(f"{itype} ${rate:.4g}/h")
        return total, ", ".join(dict.fromkeys(parts))


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def log_tail(logs: Any, image: dict, lines: int = LOG_TAIL_LINES) -> list[str]:
    group, stream = f"/aws/imagebuilder/{image['name']}", image["version"]
    try:
        events = logs.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=False,
                                     limit=lines).get("events", [])
    except Exception as e:  # noqa: BLE001 - ResourceNotFoundException: no log uploaded (yet)
        return [f"(no build log in {group} stream {stream}: {type(e).__name__})"]
    return [f"{group} {stream}:"] + ["  " + ev.get("message", "").rstrip() for ev in events]


def follow(aws: Aws, region: str, version_arn: str, fallback_type: str, out: TextIO,
           poll_s: float = 30.0) -> tuple[dict, float | None, float]:
    """Poll one build to its end. Returns (image, estimated $, seconds)."""
    ib = aws.client("imagebuilder", region)
    coster = Coster(aws.client("ec2", region), region, aws.price, fallback_type)
    start = aws.now()
    last, last_print = None, None
    while True:
        image = ib.get_image(imageBuildVersionArn=version_arn)["image"]
        p = progress(ib, version_arn, image)
        now = aws.now()
        cost, rates = coster.so_far(p, now)
        key = (p.status, p.workflow, p.step, p.step_status)
        if key != last or last_print is None or (now - last_print).total_seconds() >= HEARTBEAT_S:
            step = f"{p.workflow.lower()}: {p.step} ({p.step_status})" if p.step else "-"
            money = f"est. ${cost:.2f} so far ({rates})" if cost is not None else f"cost unknown ({rates})"
            print(f"[{_clock((now - start).total_seconds())}] {p.status:<12} {step}  {money}", file=out, flush=True)
            last, last_print = key, now
        if p.status in OK_STATES or p.status in FAILED_STATES:
            if p.status in FAILED_STATES:
                print(f"{image.get('name')} {image.get('version')}: {p.status}: "
                      f"{image['state'].get('reason', 'no reason given')}", file=out)
                for name, message in p.failed_steps:
                    print(f"failed step {name}: {message}", file=out)
                for line in log_tail(aws.client("logs", region), image):
                    print(line, file=out)
            return image, cost, (now - start).total_seconds()
        aws.sleep(poll_s)


# What ami/components/vllm-cuda.yaml and ami/scripts/neuron-precompile.sh print once the weights
# are in the image: "kit-model-revision <model> <commit>".
BAKED_LINE = re.compile(r"kit-model-revision (\S+) ([0-9a-f]{40})\b")


def tag_baked_revision(ec2: Any, logs: Any, image: dict, ami: str | None, out: TextIO) -> None:
    """An image built without a pinned commit holds the newest one, which its pipeline could not
    know when it tagged the AMI (``kit-model-revision: unpinned``, stacks/images.py baked_tags):
    tag it with the commit the build printed, so preflight can compare it with a pin."""
    try:
        found = ec2.describe_images(ImageIds=[ami])["Images"] if ami else []
        tags = {t["Key"]: t["Value"] for t in found[0].get("Tags", [])} if found else {}
    except Exception:  # noqa: BLE001 - a fake or a missing permission: nothing to tag
        return
    if tags.get("kit-model-revision") != "unpinned":
        return
    group, stream = f"/aws/imagebuilder/{image['name']}", image["version"]
    try:
        events = logs.filter_log_events(logGroupName=group, logStreamNames=[stream],
                                        filterPattern='"kit-model-revision"').get("events", [])
        sha = next((m.group(2) for ev in events if (m := BAKED_LINE.search(ev.get("message", "")))
                    and m.group(1) == tags.get("kit-model")), None)
        if sha is None:
            print(f"{ami}: built unpinned, and {group} {stream} names no commit; its commit is in the image "
                  "(/etc/inference-kit/prepulled-revision or the checkpoint's .kit-revision)", file=out)
            return
        ec2.create_tags(Resources=[ami], Tags=[{"Key": "kit-model-revision", "Value": sha}])
    except Exception as e:  # noqa: BLE001 - the image is built and published either way
        print(f"{ami}: built unpinned; its commit was not tagged ({type(e).__name__}: {str(e)[:160]})", file=out)
        return
    print(f"{ami}: holds {tags.get('kit-model')} at {sha}, tagged kit-model-revision", file=out)


def output_ami(image: dict, region: str) -> str | None:
    amis = (image.get("outputResources") or {}).get("amis") or []
    return next((a["image"] for a in amis if a.get("region") == region), amis[0]["image"] if amis else None)


# -- commands ---------------------------------------------------------------------------------

def _record(aws: Aws, region: str, why: str) -> None:
    """Remember ``region`` before anything is made there, so ``python -m harness leftovers`` looks
    there even once the configuration no longer names it (``--region R``, or a backend moved
    with ``<id>_region`` and later moved back): the image stack's KMS key outlives it, and the
    AMIs and snapshots outlive both."""
    if aws.record_region is not None:
        aws.record_region(region, why)


def build(aws: Aws, region: str, image: str, stack: str, out: TextIO,
          deploy: Callable[[str], int] | None, poll_s: float = 30.0) -> int:
    f = image_facts()
    ib = aws.client("imagebuilder", region)
    total_cost: float | None = 0.0
    total_s = 0.0
    ami = None
    for key in pipeline_keys(image):
        name = f.pipeline_name(image, key)
        arn = find_pipeline(ib, name)
        if arn is None:
            if deploy is None:
                print(f"pipeline {name} does not exist in {region}: deploy its stack first: npx cdk deploy {stack}"
                      f" (or drop --no-deploy)", file=out)
                return 1
            print(f"pipeline {name} does not exist in {region}: deploying {stack} (pipelines build nothing "
                  "until started)", file=out, flush=True)
            _record(aws, region, f"images build {image}: deploys {stack} (its retained KMS key)")
            rc = deploy(stack)
            if rc != 0:
                print(f"npx cdk deploy {stack} failed (exit {rc}); nothing was built", file=out)
                return 1
            arn = find_pipeline(ib, name)
            if arn is None:
                print(f"pipeline {name} still missing in {region} after deploying {stack}", file=out)
                return 1
        _record(aws, region, f"images build {image}: starts {name} (AMIs and snapshots)")
        # A build started by hand takes its Image Builder image's tags from this request, not from
        # the pipeline's imageTags (botocore imagebuilder 2019-12-02 service-2.json: ImagePipeline
        # imageTags "... Builds that you start manually use the tags from the
        # StartImagePipelineExecution request instead"; StartImagePipelineExecutionRequest tags:
        # "The tags for Image Builder to apply to the image resource that's created when pipeline
        # execution starts"). The pipeline's lifecycle policy selects builds by these tags
        # (ResourceSelection tagMap, stacks/images.py): without them a build would be kept forever.
        r = ib.start_image_pipeline_execution(imagePipelineArn=arn, clientToken=str(uuid.uuid4()),
                                              tags=f.lifecycle_tags(image, key))
        version_arn = r["imageBuildVersionArn"]
        print(f"started {name}: {version_arn}", file=out, flush=True)
        try:
            result, cost, seconds = follow(aws, region, version_arn, f.BUILD_HOSTS[image][key][0], out, poll_s)
        except KeyboardInterrupt:
            # Only the following stops: Image Builder runs the build (and its instance) on its own.
            later = pipeline_keys(image)[pipeline_keys(image).index(key) + 1:]
            print(f"\ninterrupted: the build {version_arn} goes on in {region}, its instance billed until it ends"
                  + (f" (and {', '.join(f.pipeline_name(image, k) for k in later)} will not start)" if later else "")
                  + f"; see it: python -m harness images status --region {region}; stop it: aws imagebuilder "
                  f"cancel-image-creation --image-build-version-arn {version_arn} --region {region}", file=out)
            return 130
        total_s += seconds
        total_cost = None if cost is None or total_cost is None else total_cost + cost
        money = f"est. ${total_cost:.2f}" if total_cost is not None else "cost unknown"
        if result["state"]["status"] not in OK_STATES:
            print(f"{image}: build failed in {name} after {_clock(total_s)} ({money}); nothing was published "
                  f"to {published_parameter(image, key)}", file=out)
            return 1
        ami = output_ami(result, region)
        if key != pipeline_keys(image)[-1]:
            print(f"{name} done: {ami} published to {published_parameter(image, key)}", file=out, flush=True)
    parameter = f.IMAGE_PARAMETERS[image]
    money = f"est. ${total_cost:.2f}" if total_cost is not None else "cost unknown"
    print(f"{image}: {ami} in {region}, published to {parameter} ({_clock(total_s)}, {money})", file=out)
    tag_baked_revision(aws.client("ec2", region), aws.client("logs", region), result, ami, out)
    return 0


def kit_pipelines(ib: Any) -> list[dict]:
    """Every pipeline named inference-kit-* in the region."""
    out, token = [], None
    while True:
        kw = {"nextToken": token} if token else {}
        r = ib.list_image_pipelines(**kw)
        out += [p for p in r.get("imagePipelineList", []) if p.get("name", "").startswith("inference-kit-")]
        token = r.get("nextToken")
        if not token:
            return out


def status(aws: Aws, region: str, out: TextIO) -> int:
    ib = aws.client("imagebuilder", region)
    running = 0
    coster = Coster(aws.client("ec2", region), region, aws.price, "")
    for pipe in kit_pipelines(ib):
        images = ib.list_image_pipeline_images(imagePipelineArn=pipe["arn"]).get("imageSummaryList", [])
        for summary in images:
            state = summary["state"]["status"]
            if state in OK_STATES or state in FAILED_STATES:
                continue
            running += 1
            p = progress(ib, summary["arn"], summary)
            now = aws.now()
            cost, rates = coster.so_far(p, now)
            started = _ts(summary.get("dateCreated")) or now
            step = f"{p.workflow.lower()}: {p.step} ({p.step_status})" if p.step else "-"
            money = f"est. ${cost:.2f} so far ({rates})" if cost is not None else f"cost unknown ({rates})"
            print(f"{pipe['name']} {summary['version']}: {state}, {step}, {_clock((now - started).total_seconds())}"
                  f" elapsed, {money}", file=out)
    if not running:
        print(f"no image build running in {region}", file=out)
    return 0


@dataclass
class SnapshotRow:
    snapshot_id: str
    gib: float
    usd_month: float
    encrypted: bool
    kms_key: str


def _snapshots(ec2: Any, ids: list[str]) -> dict[str, dict]:
    if not ids:
        return {}
    return {s["SnapshotId"]: s for s in ec2.describe_snapshots(SnapshotIds=ids).get("Snapshots", [])}


def kit_amis(ec2: Any) -> list[dict]:
    r = ec2.describe_images(Owners=["self"], Filters=[{"Name": f"tag:{TAG_KEY}", "Values": [TAG_VALUE]}])
    return sorted(r.get("Images", []), key=lambda i: i.get("CreationDate", ""))


def snapshot_ids(image: dict) -> list[str]:
    return [b["Ebs"]["SnapshotId"] for b in image.get("BlockDeviceMappings", [])
            if b.get("Ebs", {}).get("SnapshotId")]


def snapshot_size_gb(s: dict) -> float:
    """Billed size bound: all blocks written (FullSnapshotSizeInBytes), else the volume size."""
    if s.get("FullSnapshotSizeInBytes") is not None:
        return gb(s["FullSnapshotSizeInBytes"])
    return float(s.get("VolumeSize", 0))


def list_images(aws: Aws, regions: Iterable[str], out: TextIO) -> int:
    f = image_facts()
    price = STORAGE_PRICES["ebs_snapshot"]
    grand = 0.0
    for region in regions:
        ec2 = aws.client("ec2", region)
        amis = kit_amis(ec2)
        current = _current_amis(aws.client("ssm", region), [*f.IMAGE_PARAMETERS.values(), f.SM75_CANDIDATE_PARAMETER])
        snaps = _snapshots(ec2, [s for a in amis for s in snapshot_ids(a)])
        region_total = 0.0
        print(f"{region}: {len(amis)} kit AMI{'s' if len(amis) != 1 else ''}", file=out)
        for a in amis:
            tags = {t["Key"]: t["Value"] for t in a.get("Tags", [])}
            cost = 0.0
            parts = []
            for sid in snapshot_ids(a):
                s = snaps.get(sid, {})
                size = snapshot_size_gb(s)
                cost += monthly("ebs_snapshot", size)
                parts.append(f"{sid} {size:.1f} GB")
            region_total += cost
            mark = f"  <- {current[a['ImageId']]}" if a["ImageId"] in current else ""
            print(f"  {a['ImageId']}  {tags.get('kit-image', '?'):<16} {a.get('CreationDate', '')[:19]}  "
                  f"{', '.join(parts) or 'no snapshots'}  ${cost:.2f}/month{mark}", file=out)
        print(f"  {region} total: ${region_total:.2f}/month", file=out)
        grand += region_total
    print(f"snapshot storage ${price.usd}/{price.unit} (us-east-1 price, {price.source}); sizes are all blocks "
          f"written, an upper bound of what is billed. Total ${grand:.2f}/month", file=out)
    return 0


def _current_amis(ssm: Any, names: list[str]) -> dict[str, str]:
    """AMI id -> the parameter that points at it (the images backends boot now)."""
    out: dict[str, str] = {}
    for i in range(0, len(names), 10):
        r = ssm.get_parameters(Names=names[i:i + 10])
        out.update({p["Value"]: p["Name"] for p in r.get("Parameters", [])})
    return out


def backends_booting(image: str) -> list[str]:
    """Backend ids whose boot image is ``image`` (for the attendee's -c <id>_ami line)."""
    from kit.catalog import BACKENDS

    f = image_facts()
    out = []
    for bid, b in BACKENDS.items():
        fam = f.FAMILY_IMAGE.get(b.image or "")
        if fam == image or (fam == "neuron" and image in f.NEURON_IMAGES.values()):
            out.append(bid)
    return out


# -- CLI --------------------------------------------------------------------------------------

def _context(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    from kit.regions import command_context

    return command_context(path, overrides, "harness images")


def _stack_name(image: str, region: str, kit_region: str) -> str:
    name = image_facts().IMAGE_STACKS[image]
    return name if region == kit_region else f"{name}-{region}"


def _stack_context(ctx: dict[str, Any], image: str, region: str | None = None) -> list[str]:
    """The -c values the app needs to synthesize ``image``'s stack: a Neuron line's image exists
    only with ``neuron_sdk`` set to its line (kit/image_facts.py), and every image only while a
    backend that boots it is selected (kit/image_needs.py pipeline_images), in ``region`` (the app
    makes a region's image stacks for the backends placed there: stacks/wiring.py). A backend that
    boots an AMI given by id (``<id>_ami``, e.g. from the organizer's own cdk.context.json after a
    share) does not ask for the image's stack: ``<id>_ami=`` (read as none, kit/config.py) undoes
    it for the build, so the stack is there whatever AMI the context names. Raises ValueError."""
    from kit.config import ConfigError, parse
    from kit.image_needs import pipeline_images

    extra = []
    line = next((ln for ln, im in image_facts().NEURON_IMAGES.items() if im == image), None)
    if line is not None and ctx.get("neuron_sdk", _default_line()) != line:
        extra.append(f"neuron_sdk={line}")
    extra += [f"{bid}_ami=" for bid in backends_booting(image) if ctx.get(f"{bid}_ami")]
    try:
        config = parse({**ctx, **dict(e.split("=", 1) for e in extra)})
    except ConfigError as e:
        raise ValueError(f"config error: {e}") from None
    if image not in pipeline_images(config):
        boots = ", ".join(backends_booting(image))
        raise ValueError(f"harness images build: no selected backend boots {image} (backends="
                         f"{','.join(config.backend_ids)}); select one of {boots}, e.g. -c backends={boots.split(',')[0]}")
    if region is not None:
        from dataclasses import replace

        here = tuple(bc for bc in config.backends if bc.region == region)
        if image not in pipeline_images(replace(config, backends=here)):
            placed = sorted({bc.region for bc in config.backends if bc.id in backends_booting(image)})
            bid = next(b for b in backends_booting(image) if b in config.backend_ids)
            raise ValueError(f"harness images build: no selected backend that boots {image} deploys to {region} "
                             f"({bid} deploys to {', '.join(placed)}), so the app has no {image} image stack there; "
                             f"build it where it boots (--region {placed[0]}), or move it: -c {bid}_region={region}")
    return extra


def _default_line() -> str:
    from kit import pins

    return pins.NEURON_DEFAULT_LINE


def _cdk_deploy(context_args: list[str]) -> Callable[[str], int]:
    import subprocess

    def run(stack: str) -> int:
        cmd = ["npx", "cdk", "deploy", stack, *[a for c in context_args for a in ("-c", c)]]
        print("$ " + " ".join(cmd), flush=True)
        return subprocess.call(cmd)
    return run


def _price_book() -> PriceFor:
    from harness.cost.prices import PriceBook

    book = PriceBook.auto()
    return lambda itype, region: book.instance(itype, region).usd_per_hour


@dataclass
class ShareInput:
    accounts: list[str]
    config: Any  # kit.config.KitConfig
    targets: list[Any]  # harness.account.image_share.Target
    overrides: dict[str, str]  # the organizer's -c values an attendee's deploy keeps


def _share_input(a: argparse.Namespace, ctx: dict[str, Any], kit: Any, images: list[str]) -> ShareInput:
    """Everything ``share`` needs from its arguments, checked before any AWS call (ValueError: exit 2)."""
    from harness.account.image_share import ACCOUNT, AMI_ID, Target
    from kit.config import KNOWN_KEYS, ConfigError, parse
    from kit.image_needs import image_needs
    from kit.regions import RegionError, check_region

    accounts = list(dict.fromkeys(x.strip() for x in (a.account or "").split(",")))
    bad = [x for x in accounts if not ACCOUNT.match(x)]
    if bad or not accounts:
        raise ValueError(f"harness images share: --account {bad[0] if bad else a.account!r} is not a 12-digit AWS "
                         "account id (several: --account 111122223333,444455556666)")
    if a.ami and not AMI_ID.match(a.ami):
        raise ValueError(f"harness images share: --ami {a.ami!r} is not an AMI id (ami- and 8 or 17 hex digits, "
                         "e.g. ami-0123456789abcdef0)")
    if a.image and a.image not in images:
        raise ValueError(f"harness images share: image {a.image!r} is not a kit image; valid: {', '.join(images)}")
    if a.ami and a.image:
        raise ValueError("harness images share: --ami and --image name the same thing twice; give one")
    try:
        for r in a.source_region:
            check_region("--source-region", r)
    except RegionError as e:
        raise ValueError(f"harness images share: {e}") from None
    try:
        config = parse({**ctx, "region": kit.region})
    except ConfigError as e:
        raise ValueError(f"config error: {e}") from None
    overrides = {}
    for o in a.context:
        key, _, value = o.partition("=")
        if key in KNOWN_KEYS and key not in ("region", "backends") and not key.endswith(("_region", "_ami")):
            overrides[key] = value
    if config.neuron_sdk != _default_line():
        overrides["neuron_sdk"] = config.neuron_sdk
    if a.ami:
        return ShareInput(accounts, config, [Target("", kit.region, (), ami=a.ami, how="--ami")], overrides)
    # The kit's images by their parameter, and AMIs the context already names (-c <id>_ami, or an
    # earlier share's cdk.context.json in this project): shared again as they are.
    needs = image_needs(config)
    selected = ",".join(config.backend_ids)
    if a.image:
        needs = [n for n in needs if n.image == a.image
                 or (n.ami and set(n.backend_ids) & set(backends_booting(a.image)))]
        if not needs:
            boots = ",".join(b for b in backends_booting(a.image)) or "none"
            raise ValueError(f"harness images share: no selected backend boots {a.image} (backends={selected}); "
                             f"select one of {boots}, e.g. -c backends={boots.split(',')[0]}")
    if not needs:
        raise ValueError(f"harness images share: the configuration boots none of the kit's images (backends={selected}); "
                         "select an EC2 backend (-c backends=inf2), or give --ami")
    for bid in {b for n in needs for b in n.backend_ids}:
        if ctx.get(f"{bid}_image"):
            overrides[f"{bid}_image"] = str(ctx[f"{bid}_image"])
    return ShareInput(accounts, config, [Target(n.image, n.region, n.backend_ids) if n.parameter else
                                         Target("", n.region, n.backend_ids, ami=n.ami, how=f"-c {n.image}")
                                         for n in needs], overrides)


def _share(aws: Aws, a: argparse.Namespace, kit: Any, s: ShareInput, out: TextIO) -> int:
    from harness.account import image_share as sh

    f = image_facts()
    try:
        if a.write_context:  # a key cdk.json would hide: refused before anything changes
            sh.check_not_shadowed(a.write_context, sh.context_keys(s.targets, s.overrides), "nothing was changed")
        sh.plan(aws, s.targets, [*kit.regions, *a.source_region], s.config.image_kms_key, f.IMAGE_PARAMETERS)
        for t in s.targets:
            if t.how == "--ami" and t.image:  # the AMI's kit-image tag says which backends boot it
                t.backend_ids = tuple(b.id for b in s.config.backends
                                      if b.id in backends_booting(t.image) and b.region == t.region)
        sh.share_all(aws, s.accounts, s.targets, out)
    except sh.ShareError as e:
        raise ImagesError(str(e)) from None
    ctx = sh.attendee_context(s.targets, kit.region, s.overrides)
    if not ctx["backends"]:
        t = s.targets[0]
        print(f"{t.ami} has no kit-image tag (or no selected backend in {t.region} boots its image): the attendee "
              f"sets -c <backend id>_ami={t.ami} -c region={t.region} for the EC2 backend that boots it", file=out)
        return 0
    sh.print_context(s.accounts, ctx, s.targets, out)
    if a.write_context:
        try:
            sh.write_context(a.write_context, ctx, out)
        except sh.ShareError as e:
            raise ImagesError(str(e)) from None
    return 0


@one_line_errors("harness images")
def main(argv: list[str] | None = None, *, aws: Aws | None = None, out: TextIO = sys.stdout,
         deploy: Callable[[str], int] | None = None) -> int:
    f = image_facts()
    images = list(f.IMAGE_PARAMETERS)
    p = OneLineParser(prog="python -m harness images", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["build", "status", "list", "share"])
    p.add_argument("image", nargs="?", help=f"build: one of {', '.join(images)}")
    p.add_argument("--image", dest="image_option", help="share: only this image (default: every kit image the configuration boots)")
    p.add_argument("--region", help="default: context region (cdk.json), not the shell's")
    p.add_argument("--account", help="share: the 12-digit accounts to grant, comma-separated")
    p.add_argument("--ami", help="share: this AMI id (in --region) instead of the kit's published images")
    p.add_argument("--source-region", action="append", default=[], metavar="R",
                   help="share: also look here for an image the configured regions lack (copied from there)")
    p.add_argument("--write-context", type=Path, default=None, metavar="PATH",
                   help="share: write the attendees' context there (the project's cdk.context.json)")
    p.add_argument("--no-deploy", action="store_true", help="build: refuse instead of deploying a missing image stack")
    p.add_argument("--poll", type=float, default=30.0, help="build: seconds between polls (default 30)")
    p.add_argument("--cdk-json", type=Path, default=None, help="default ./cdk.json")
    p.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    try:
        a = p.parse_args(argv)
        a.image = a.image or a.image_option
        ctx = _context(a.cdk_json, a.context)
        from kit.regions import RegionError, resolve

        try:
            kit = resolve(a.region, context=ctx, cdk_json=a.cdk_json)
        except RegionError as e:
            raise ValueError(f"harness images: {e}") from None
        region = kit.region
        if a.command == "build" and a.image not in images:
            raise ValueError(f"harness images build: image {a.image!r} is not a kit image; valid: {', '.join(images)}")
        if a.command == "build":
            _stack_context(ctx, a.image, region)  # a stack the app would not build: say so now (exit 2)
        if a.command == "share":
            shares = _share_input(a, ctx, kit, images)
        if a.poll <= 0:
            raise ValueError(f"harness images: --poll {a.poll} must be > 0 seconds")
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if aws is None:
        import boto3

        from harness.account import touched

        aws = Aws(client=lambda service, r: boto3.client(service, region_name=r), price=_price_book(),
                  record_region=touched.record_region)
    try:
        if a.command == "build":
            if deploy is None and not a.no_deploy:
                deploy = _cdk_deploy(a.context + _stack_context(ctx, a.image))
            # The stack's name as the app makes it: suffixed unless ``region`` is the app's own kit
            # region, the context's (the deploy passes the -c values, not --region).
            app_region = resolve(None, context=ctx).region
            return build(aws, region, a.image, _stack_name(a.image, region, app_region), out,
                         None if a.no_deploy else deploy, a.poll)
        if a.command == "status":
            return status(aws, region, out)
        if a.command == "list":
            return list_images(aws, [region] if a.region else kit.regions, out)
        return _share(aws, a, kit, shares, out)
    except ImagesError as e:
        print(e, file=out)
        return 1
    except KeyboardInterrupt:  # share, waiting for a copy: image_share said what goes on
        return 130
    except Exception as e:  # botocore's ClientError / NoCredentialsError ...: one line, not a traceback
        from botocore.exceptions import BotoCoreError, ClientError

        if not isinstance(e, (BotoCoreError, ClientError)):
            raise
        print(f"harness images {a.command}: {(str(e).splitlines() or [type(e).__name__])[0][:300]}", file=out)
        return 1


if __name__ == "__main__":
    sys.exit(main())
