"""What a fresh account trips on before anything is spent, for harness.account.preflight.

Checked per region, for the backends a deploy would create:

* the machine image each EC2 backend boots: an AMI given with ``-c <id>_ami`` (a workshop
  attendee's shared image) is visible to the account and ``available`` (``DescribeImages``), and
  nothing is to be built for it; otherwise its SSM parameter resolves (``GetParameters``); a kit
  image (``/imagebuilder/inference-kit/ami/*``) that is not built yet blocks the backend, with the
  commands that build it, and then what the build needs is checked too:
  - the parent image's public parameter resolves (or ``neuron_parent_image`` exists),
  - an AZ offers every build host type of each pipeline (``DescribeInstanceTypeOfferings``),
  - the vCPU quota of each build host's class: the On-Demand Standard quota
    (``L-1216C47A``) for the sm_75 build's c7g.8xlarge (32 vCPUs, ``DescribeInstanceTypes``),
    G and VT / Inf for the GPU and Neuron hosts;
* the SageMaker container image: the tag exists in the region's Deep Learning Containers
  registry (``ecr:BatchGetImage``, see ``check_container_image`` for why not DescribeImages).

Every BLOCK line ends in the exact fix: a Service Quotas request command with its quota code, the
deploy and pipeline commands, or the context value to change. The fix commands are built here and
tested; the API response shapes the tests replay are botocore's own (validated by
``botocore.stub.Stubber``) or moto's.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable

# Service Quotas codes (service code ec2). Source: the AWS default quotas as listed by
# ``list-aws-default-service-quotas --service-code ec2`` in gruntwork-io/terraform-aws-utilities
# docs/quotas.md (commit 04f58839): "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
# instances" L-1216C47A default 5.0; "Running On-Demand G and VT instances" L-DB2E81BA 0.0;
# "Running On-Demand Inf instances" L-1945791B 0.0; "Running On-Demand Trn instances" L-2C3B7624 0.0.
EC2_QUOTAS: dict[str, tuple[str, str]] = {
    "Standard": ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    "G": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "Inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "Trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
}
# SageMaker endpoint quotas have one code per instance type; preflight reads the code from
# ListServiceQuotas (QuotaCode) and falls back to these only to print the fix when that list
# cannot be read. ml.g6.xlarge: L-D470D954, as three public quota audits captured from
# ``aws service-quotas list-service-quotas --service-code sagemaker`` record it (found with the
# code search; AWS's quota docs list names, not codes). ml.g5.xlarge: L-1928E07B (the defaults
# list above, value 0.0).
SAGEMAKER_ENDPOINT_QUOTA_CODES: dict[str, str] = {"ml.g6.xlarge": "L-D470D954", "ml.g5.xlarge": "L-1928E07B"}

KIT_IMAGE_PREFIX = "/imagebuilder/"


def quota_class(instance_type: str) -> str | None:
    """Which On-Demand vCPU quota an EC2 type draws from (None: one the kit does not track)."""
    family = instance_type.split(".", 1)[0]
    if family.startswith("inf"):
        return "Inf"
    if family.startswith("trn"):
        return "Trn"
    if family.startswith(("g", "vt")):
        return "G"
    if family.startswith("dl"):  # DL1/DL2q have quotas of their own
        return None
    if family[:1] in tuple("acdhimrtz"):
        return "Standard"
    return None


def quota_fix(service: str, code: str, desired: float, region: str) -> str:
    return (f"aws service-quotas request-service-quota-increase --service-code {service} "
            f"--quota-code {code} --desired-value {desired:g} --region {region}")


def build_commands(image: str, region: str) -> str:
    """The one command that builds a kit image (harness/account/images.py: deploys the image stack when
    missing, starts its pipelines in order and follows them)."""
    return f"python -m harness images build {image} --region {region}"


def resolve_parameters(ssm: Any, names: Iterable[str]) -> dict[str, str | None]:
    """Name -> value, None for a name that does not resolve (GetParameters lists it under
    InvalidParameters); at most 10 names a call (the API's limit)."""
    names = list(dict.fromkeys(names))
    out: dict[str, str | None] = {}
    for i in range(0, len(names), 10):
        r = ssm.get_parameters(Names=names[i:i + 10])
        out.update({p["Name"]: p.get("Value") for p in r.get("Parameters", [])})
        out.update({n: None for n in r.get("InvalidParameters", [])})
    return out


def vcpus_of(ec2: Any, types: Iterable[str]) -> dict[str, int]:
    """DefaultVCpus of each type, from DescribeInstanceTypes."""
    types = sorted(set(types))
    if not types:
        return {}
    r = ec2.describe_instance_types(InstanceTypes=types)
    return {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in r.get("InstanceTypes", [])}


def offered_azs(ec2: Any, instance_type: str) -> list[str]:
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}])
    return sorted({o["Location"] for p in pages for o in p.get("InstanceTypeOfferings", [])})


Add = Callable[[str, str, str, str], None]  # (backend, check, status, detail)
QuotaFn = Callable[[str, str], "float | None"]


def check_given_ami(add: Add, region: str, ec2: Any, backend: str, ami: str,
                    short: Callable[[BaseException], str], account: str | None = None, images: Any = None) -> None:
    """``-c <id>_ami``: the AMI this account would launch instead of the kit's image. EC2
    DescribeImages answers ``InvalidAMIID.NotFound`` for an AMI that is neither the account's nor
    shared with it (EC2 API reference, DescribeImages); its fix is the owner's share command
    (harness.account.images share), addressed to this account (``account``, from STS GetCallerIdentity).
    ``images``: the run's harness.account.preflight_weights.ImageLookup (one DescribeImages per AMI)."""
    from harness.account.preflight_weights import ImageLookup

    image = (images or ImageLookup(ec2, short)).get(ami)
    if isinstance(image, str):  # not a "not found": nothing can be judged
        add(backend, "AMI (-c)", "warn", image.replace("could not read", "could not look up", 1))
        return
    state = image.get("State") if image else None
    if state == "available":
        owner = image.get("OwnerId", "?")
        add(backend, "AMI (-c)", "ok", f"{backend}_ami={ami} available in {region} (owner {owner})")
        return
    if image is None:
        # Only its owner can share it, and this account cannot see who that is.
        fix = (f"ask the account that shared {ami} (your workshop organizer) to run python -m harness images share "
               f"--account {account or '<this account>'} --ami {ami} --region {region}, or drop -c {backend}_ami")
        add(backend, "AMI (-c)", "BLOCK", f"{backend}_ami={ami} is not visible to this account in {region}; fix: {fix}")
    else:
        owner = image.get("OwnerId", "?")
        add(backend, "AMI (-c)", "BLOCK", f"{backend}_ami={ami} is {state} in {region} (owner {owner}); fix: ask "
            f"{owner} for an available image, or drop -c {backend}_ami")


def check_shared_image(add: Add, region: str, backend: str, ami: str, image: Any, account: str,
                       hourly: list[tuple[str, float | None]], volume_gib: int) -> None:
    """What an attendee's deploy of ``backend`` bills when it boots an AMI another account owns
    (DescribeImages OwnerId != this account): its instances' on-demand price (the price lines'
    figures, ``hourly``: (instance type, $/h or None) per stack) and each instance's gp3 root
    volume; the image itself bills its owner, whose account holds its snapshots (EC2 User Guide,
    "Share an AMI with specific AWS accounts": the snapshots are not shared, "the system provides
    the instance access to the referenced EBS snapshots"; EC2 Developer Guide, "Sharing AMIs":
    "You are not billed when your AMI is launched by other users. Users launching the AMI are
    billed."), and who to ask when a launch is refused on its snapshots or key."""
    from harness.cost.storage_prices import HOURS_PER_MONTH, monthly

    if not isinstance(image, dict) or image.get("State") != "available" or image.get("OwnerId") in (None, account):
        return
    owner = image["OwnerId"]
    volume = monthly("ebs_gp3", volume_gib) / HOURS_PER_MONTH
    parts = [f"{it} ${rate:g}/h" if rate is not None else f"{it} (price unknown)" for it, rate in hourly]
    known = [rate for _, rate in hourly if rate is not None]
    total = sum(known) + volume * len(hourly)
    bills = (f"${total:.4f}/h" + (" or more" if len(known) < len(hourly) else "") +
             f" while it runs ({', '.join(parts)} on demand, and {volume_gib} GiB gp3 root volume ${volume:.4f}/h"
             + (" each" if len(hourly) > 1 else "") + ")")
    add(backend, "shared image", "ok", f"{ami} belongs to account {owner}: the image costs you nothing (its owner pays "
        f"its snapshots); your deploy bills {bills}; if a launch is refused on its snapshots or key, ask {owner} to run "
        f"python -m harness images share --account {account} --ami {ami} --region {region}")


def check_images(add: Add, region: str, ssm: Any, ec2: Any, quota: QuotaFn,
                 wanted: dict[str, list[str]], boot: dict[str, str], neuron_parent: str | None,
                 short: Callable[[BaseException], str], image_az: str | None = None) -> None:
    """``boot``: backend id -> the SSM parameter its instance boots; ``wanted``: kit image ->
    the backend ids that boot it. Kit images not built yet are checked as builds, in
    ``image_az`` (``-c image_az``) when one is set."""
    from kit.image_facts import IMAGE_PARAMETERS, PARENT_PARAMETERS

    names = set(boot.values()) | {PARENT_PARAMETERS[i] for i in wanted if i in PARENT_PARAMETERS}
    try:
        values = resolve_parameters(ssm, names)
    except Exception as exc:  # noqa: BLE001 - e.g. no ssm:GetParameters permission
        for bid in boot:
            add(bid, "AMI parameter", "warn", f"could not read SSM parameters: {short(exc)}")
        return
    to_build = []
    states: dict[str, str | None] = {}
    for bid, name in boot.items():
        value = values.get(name)
        image = next((i for i, p in IMAGE_PARAMETERS.items() if p == name), None)
        if value and image:
            # The kit's parameter outlives its AMI (Image Builder writes it, no stack owns it): the
            # AMI it names must be available, as the deploy's own check (Custom::ImagesReady) requires.
            if value not in states:
                try:
                    found = ec2.describe_images(ImageIds=[value]).get("Images", [])
                    states[value] = found[0].get("State") if found else None
                except Exception as exc:  # noqa: BLE001 - not found is a BLOCK, anything else a warning
                    code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
                    if not code.startswith("InvalidAMIID"):
                        add(bid, "AMI parameter", "warn", f"{name} = {value}; could not look the AMI up: {short(exc)}")
                        continue
                    states[value] = None
            state = states[value]
            if state == "available":
                add(bid, "AMI parameter", "ok", f"{name} = {value}")
                continue
            why = "which is not visible to this account (deregistered?)" if state is None else f"which is {state}"
            add(bid, "AMI parameter", "BLOCK", f"image {image} in {region}: {name} names {value}, {why}; "
                f"fix: {build_commands(image, region)}")
            to_build.append(image)
        elif value:
            add(bid, "AMI parameter", "ok", f"{name} = {value}")
        elif image:
            add(bid, "AMI parameter", "BLOCK", f"image {image} not built in {region} ({name} missing); "
                f"fix: {build_commands(image, region)}")
            to_build.append(image)
        else:
            add(bid, "AMI parameter", "BLOCK", f"{name} does not resolve in {region}: the image it names is "
                f"not published there; fix: deploy this backend to another region (-c {bid}_region=<region>)")
    for image in dict.fromkeys(to_build):
        _check_build(add, region, ec2, quota, image, wanted[image], values, neuron_parent, short, image_az)


def _check_build(add: Add, region: str, ec2: Any, quota: QuotaFn, image: str, backends: list[str],
                 values: dict[str, str | None], neuron_parent: str | None,
                 short: Callable[[BaseException], str], image_az: str | None = None) -> None:
    from kit.image_facts import BUILD_HOSTS, PARENT_AMI_NAMES, PARENT_PARAMETERS

    def each(status: str, check: str, detail: str) -> None:
        for bid in backends:
            add(bid, check, status, detail)

    if image.startswith("neuron") and neuron_parent:
        try:
            found = ec2.describe_images(ImageIds=[neuron_parent]).get("Images", [])
        except Exception as exc:  # noqa: BLE001 - InvalidAMIID.NotFound / .Malformed
            found, why = [], short(exc)
        else:
            why = "not found"
        if found:
            each("ok", f"{image} parent", f"{neuron_parent} (neuron_parent_image)")
        else:
            each("BLOCK", f"{image} parent", f"neuron_parent_image {neuron_parent} in {region}: {why}; fix: "
                 "give an AMI id of this region (docs/images.md: describe-images for the Neuron DLAMI)")
    elif image in PARENT_AMI_NAMES:  # found by name at deploy time (Custom::AmiByName), so here too
        ami_name = PARENT_AMI_NAMES[image]
        try:
            found = ec2.describe_images(Owners=["amazon"], IncludeDeprecated=True,
                                        Filters=[{"Name": "name", "Values": [ami_name]}]).get("Images", [])
        except Exception as exc:  # noqa: BLE001
            each("warn", f"{image} parent", f"could not look up {ami_name!r}: {short(exc)}")
        else:
            if found:
                each("ok", f"{image} parent", f"{ami_name} = {found[0]['ImageId']}")
            else:
                each("BLOCK", f"{image} parent", f"no Amazon-owned AMI named {ami_name!r} in {region}: the {image} "
                     "build cannot start there; fix: -c neuron_parent_image=ami-... (docs/images.md) or another region")
    else:
        parent = PARENT_PARAMETERS[image]
        if values.get(parent):
            each("ok", f"{image} parent", f"{parent} = {values[parent]}")
        else:
            each("BLOCK", f"{image} parent", f"{parent} does not resolve in {region}: the {image} build cannot "
                 "start there; fix: use another region (-c region=<region>)")

    types_all = [t for types in BUILD_HOSTS[image].values() for t in types]
    try:
        per_type = {t: offered_azs(ec2, t) for t in types_all}
        cpus = vcpus_of(ec2, types_all)
    except Exception as exc:  # noqa: BLE001
        each("warn", f"{image} build hosts", f"could not check {', '.join(types_all)}: {short(exc)}")
        return
    # One build subnet holds every build and test host of the image (stacks/images.py, the same
    # Custom::AzChoice decision as at deploy time, with image_az as its preferred AZ).
    from kit.az_choice import ChoiceError, choose

    zones = sorted({z for azs in per_type.values() for z in azs})
    try:
        chosen, fit = choose(region, zones, {t: set(per_type[t]) for t in types_all}, preferred=image_az or "")
        why = " (image_az)" if image_az else ""
        each("ok", f"{image} build subnet", f"{', '.join(fit)} offer {', '.join(types_all)}; the build will use {chosen}{why}")
    except ChoiceError as e:
        text = str(e).replace("move the backend with -c <id>_region", "build in another region with -c region")
        if image_az and text.startswith(image_az):
            each("BLOCK", f"{image} build subnet", f"image_az {text.replace('set -c <id>_az to one of them, or drop it', 'fix: set -c image_az to one of them, or drop it')}")
        else:
            each("BLOCK", f"{image} build subnet", f"{text}; fix: build the image in a region whose AZs offer "
                 "these types (-c region=<region>)")

    for key, types in BUILD_HOSTS[image].items():
        check = f"{image} {key} host"
        offered = [t for t in types if per_type[t]]
        if not offered:
            each("BLOCK", check, f"{' or '.join(types)} not offered in any AZ of {region}; fix: build the "
                 f"image in another region (-c region=<region>)")
            continue
        first = offered[0]
        cls = quota_class(first)
        need = cpus.get(first)
        if cls not in EC2_QUOTAS or need is None:
            each("ok", check, f"{first}: no vCPU quota the kit tracks")
            continue
        code, name = EC2_QUOTAS[cls]
        value = quota("ec2", code)
        if value is None:
            each("warn", check, f"{first}: could not read '{name}' ({code}), {need} vCPUs needed")
        elif value < need:
            each("BLOCK", check, f"'{name}' ({code}) = {value:g} vCPUs, the {image} {key} host {first} needs "
                 f"{need}; fix: {quota_fix('ec2', code, need, region)}")
        else:
            fallback = [t for t in offered[1:] if cpus.get(t, 0) > value]
            note = (f"; its fallback {fallback[0]} ({cpus[fallback[0]]} vCPUs) would not fit: "
                    f"{quota_fix('ec2', code, cpus[fallback[0]], region)}" if fallback else "")
            each("warn" if fallback else "ok", check, f"{first}: '{name}' ({code}) = {value:g} >= {need} vCPUs{note}")


# The vLLM DLC repository grants other accounts the pull actions (ecr:BatchGetImage,
# ecr:GetDownloadUrlForLayer, ecr:BatchCheckLayerAvailability): SageMaker names exactly these when
# a repository lacks them (aws/deep-learning-containers#5657). ecr:DescribeImages is not a pull
# action, so a repository policy need not grant it across accounts; the tag is checked with
# BatchGetImage, the call a pull makes first (ECR API reference: "When an image is pulled, the
# BatchGetImage API is called once to retrieve the image manifest"). The caller's own IAM policy
# must allow ecr:BatchGetImage; when it does not, the check says so and warns.
_MANIFEST_TYPES = ["application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.index.v1+json",
                   "application/vnd.oci.image.manifest.v1+json"]


def check_container_image(add: Add, region: str, ecr: Any, backend: str, tag: str,
                          short: Callable[[BaseException], str]) -> None:
    """The configured tag exists in the region's DLC registry; when it does not, the fix names the
    newest of the kit's recorded published tags that does (kit/dlc.py CANDIDATE_TAGS, one more
    BatchGetImage for all of them)."""
    from kit.dlc import CANDIDATE_TAGS, VLLM_REPOSITORY, DlcRegionError, dlc_account, image_uri

    try:
        uri, registry = image_uri(region, tag), dlc_account(region)
    except DlcRegionError as e:
        add(backend, "container image", "BLOCK", f"{e}; fix: -c sagemaker_region=<one of them>")
        return
    try:
        r = ecr.batch_get_image(registryId=registry, repositoryName=VLLM_REPOSITORY,
                                imageIds=[{"imageTag": tag}], acceptedMediaTypes=_MANIFEST_TYPES)
    except Exception as exc:  # noqa: BLE001
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code == "RepositoryNotFoundException":
            add(backend, "container image", "BLOCK", f"{uri}: no {VLLM_REPOSITORY} repository in {region}; "
                f"fix: deploy SageMaker in another region (-c sagemaker_region=<region>)")
        else:
            add(backend, "container image", "warn", f"could not check {uri}: {short(exc)} "
                "(needs ecr:BatchGetImage)")
        return
    if r.get("images"):
        add(backend, "container image", "ok", f"{uri} exists")
        return
    failure = (r.get("failures") or [{}])[0]
    newest = newest_present(ecr, registry, [t for t in CANDIDATE_TAGS if t != tag])
    fix = (f"fix: -c sagemaker_vllm_tag={newest} (the newest of the kit's recorded published tags, kit/dlc.py, "
           f"present in {region})" if newest else
           "fix: pick a vLLM DLC tag published in this region (-c sagemaker_vllm_tag=<tag>; "
           "aws/deep-learning-containers available_images.md)")
    add(backend, "container image", "BLOCK", f"{uri}: {failure.get('failureCode', 'not found')} "
        f"({failure.get('failureReason', '')}); {fix}")


def newest_present(ecr: Any, registry: str, tags: list[str]) -> str | None:
    """The first of ``tags`` (newest first) the registry has, asked in one BatchGetImage (at most
    100 image ids a call: ImageIdentifierList in botocore's ecr model); None when none is, or the call fails."""
    from kit.dlc import VLLM_REPOSITORY

    if not tags:
        return None
    try:
        r = ecr.batch_get_image(registryId=registry, repositoryName=VLLM_REPOSITORY,
                                imageIds=[{"imageTag": t} for t in tags[:100]], acceptedMediaTypes=_MANIFEST_TYPES)
    except Exception:  # noqa: BLE001 - the BLOCK line then names no tag
        return None
    present = {i.get("imageId", {}).get("imageTag") for i in r.get("images", [])}
    return next((t for t in tags if t in present), None)


def sagemaker_fix(instance_type: str, code: str | None, region: str, need: int = 1) -> str:
    code = code or SAGEMAKER_ENDPOINT_QUOTA_CODES.get(instance_type)
    if code:
        return quota_fix("sagemaker", code, need, region)
    return (f"request '{instance_type} for endpoint usage' >= {need} in Service Quotas (find its code: aws "
            f"service-quotas list-service-quotas --service-code sagemaker --region {region})")


def check_package_build_quota(add: Add, region: str, quota: QuotaFn, backends: list[str]) -> None:
    """The concurrent-build quota of the package build's CodeBuild environment (kit/codebuild.py),
    for the backends that serve a package: at 0 CodeBuild queues nothing and StartBuild fails."""
    from kit.codebuild import QUEUE_FACTOR, package_build_quota

    code, name = package_build_quota()
    value = quota("codebuild", code)
    for bid in backends:
        if value is None:
            add(bid, "package build quota", "warn", f"could not read '{name}' ({code}); at 0 (common in new "
                "accounts) python -m harness.package start is refused")
        elif value < 1:
            add(bid, "package build quota", "BLOCK", f"'{name}' ({code}) = {value:g}: CodeBuild queues "
                f"{QUEUE_FACTOR}x that, so the package build cannot start; fix: {quota_fix('codebuild', code, 1, region)}")
        else:
            add(bid, "package build quota", "ok", f"'{name}' ({code}) = {value:g}")


# Hugging Face user access tokens: "hf_" and 34 letters, the rule gitleaks checks for
# (gitleaks/gitleaks cmd/generate/config/rules/huggingface.go, commit 02788fb5: hf_(?i:[a-z]{34}),
# referencing huggingface.co/docs/hub/security-tokens). The kit passes the secret's whole
# SecretString as the token (stacks/sagemaker.py's dynamic reference, userdata/lib.sh
# kit_hf_token, CodeBuild's SECRETS_MANAGER variable), so anything around it goes along.
HF_TOKEN_SHAPE = re.compile(r"hf_[A-Za-z]{34}")


def token_shape(secret: str | None) -> tuple[str, str]:
    """(status, detail) for a secret's SecretString; the detail never contains the value."""
    if secret is None:
        return "BLOCK", "holds binary data (SecretBinary); the kit reads SecretString"
    if not secret.strip():
        return "BLOCK", "is empty"
    if secret != secret.strip():
        return "BLOCK", "has whitespace around the token (a newline from a file?), which would go into HF_TOKEN"
    if not secret.startswith("hf_"):
        return "BLOCK", ("does not hold a bare Hugging Face token (it should start with hf_; a JSON object or "
                         "KEY=value line would be passed to the servers as it is)")
    if not HF_TOKEN_SHAPE.fullmatch(secret):
        return "warn", f"starts with hf_ but is not hf_ and 34 letters ({len(secret)} characters); check it"
    return "ok", "holds a token shaped like one (hf_ and 34 letters; value not shown)"


def check_token_secret(add: Add, region: str, sm: Any, name: str, backends: list[str],
                       short: Callable[[BaseException], str]) -> None:
    """The Hugging Face token secret the stacks read: it exists in ``region`` and is shaped like a
    token. Without it SageMakerStack fails at deploy (dynamic reference), an EC2 boot fails after
    paid minutes and an image build after its long install."""
    create = (f"aws secretsmanager create-secret --name {name} --secret-string \"$HF_TOKEN\" --region {region}")
    try:
        value = sm.get_secret_value(SecretId=name)
    except Exception as exc:  # noqa: BLE001
        err = getattr(exc, "response", {}).get("Error", {})
        code, message = err.get("Code", ""), err.get("Message", "")
        if code == "ResourceNotFoundException":
            status, detail = "BLOCK", f"secret {name} does not exist in {region}; fix: {create}"
        elif code == "InvalidRequestException" and "deletion" in message:
            status, detail = "BLOCK", (f"secret {name} is scheduled for deletion in {region}; fix: aws secretsmanager "
                                       f"restore-secret --secret-id {name} --region {region}")
        else:
            status, detail = "warn", f"could not read secret {name}: {short(exc)} (needs secretsmanager:GetSecretValue)"
    else:
        status, shape = token_shape(value.get("SecretString"))
        detail = f"secret {name} {shape}"
        if status == "BLOCK":
            detail += (f"; fix: aws secretsmanager put-secret-value --secret-id {name} --secret-string \"$HF_TOKEN\" "
                       f"--region {region}")
    for bid in backends:
        add(bid, "HF token secret", status, detail)
