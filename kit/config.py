"""cdk.json context parsed once into typed, validated config.

Every backend fact comes from the catalog (kit/catalog.py): the backend ids and the context
keys named after them, which instance types a backend accepts (``Backend.instance_problem``:
service, architecture, families, NeuronCore count), whether ``-c model`` applies
(``open_weights``), which backend takes a list of SageMaker types (``service``), the boot-image
choices (``image_choices``) and the defaults. Nothing here names a backend id.

Every problem is a ``ConfigError`` whose message is one line naming the bad value and what would
be valid; ``app.py`` prints it and exits non-zero, so ``cdk synth`` never shows a traceback for
bad input. No aws-cdk-lib import here: the harness and tests can validate config without jsii.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from kit import pins
from kit import awsdata, dlc, subnets
from kit import weights as kit_weights
from kit import regions as kit_regions
from kit import variants as kit_variants
from kit.catalog import BACKEND_IDS, BACKENDS


class ConfigError(ValueError):
    """A context value is malformed or out of range. str(e) is the one line to show."""


_SECRET_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")
_VLLM_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class BackendConfig:
    id: str
    instance_type: str | None
    model_id: str
    # SageMaker only: one endpoint per instance type (the GPU-family sweep is a list here).
    instance_types: tuple[str, ...] = ()
    # EC2 only: the Availability Zone to prefer (checked against the type's offerings at deploy
    # time, stacks/az_choice.py); None = the first AZ that offers the type.
    az: str | None = None
    # The boot-image choice (catalog ``Backend.image_choices``, ``-c <id>_image``); None = no choice.
    image_choice: str | None = None
    # Its region (kit/regions.py): KitConfig.region unless ``-c <id>_region`` moves it.
    region: str = ""
    # A variant (kit/variants.py, ``-c <id>_variants``): its name and its position in the
    # backend's list (which block of subnet addresses it owns); None for the backend's own stack.
    variant: str | None = None
    slot: int = 0
    # EC2 only: an AMI id to boot instead of the image parameter (``-c <id>_ami``): an image another
    # account shared (harness.account.images share), or one of this account's. Checked at deploy time by
    # Custom::ImagesReady (visible, available) before the instance is created.
    ami: str | None = None
    # The commit of the weights' repository it serves (kit/weights.py: the model's, or a package's
    # source): ``-c <id>_model_revision``, else ``-c model_revision`` for that repository; None =
    # the newest at deploy time (the instance records the commit it got).
    model_revision: str | None = None

    def instance_key(self, service: str) -> str:
        """How a one-line error names the setting that chose this deployment's instance type: the
        variant's item (``g6_variants[g5]``), else ``<id>_instance_type`` (SageMaker:
        ``sagemaker_instance_types``, which takes one type too)."""
        if self.variant is not None:
            return f"{kit_variants.key(self.id)}[{self.variant}]"
        return f"{self.id}_instance_types" if service == "sagemaker" else f"{self.id}_instance_type"

    def instance_fix(self, service: str, instance_type: str) -> str:
        """The setting that would put this deployment on ``instance_type``, as the error's hint."""
        if self.variant is not None:
            return f"in -c {kit_variants.key(self.id)} give {self.variant}={self.model_id}@{instance_type}"
        return f"set -c {self.instance_key(service)}={instance_type}"


@dataclass(frozen=True)
class KitConfig:
    region: str
    backends: tuple[BackendConfig, ...]
    hf_token_secret: str  # Secrets Manager secret *name* holding the Hugging Face token
    idle_stop_minutes: int  # 0 disables idle stop
    ttl_hours: float  # hard time limit for every billable resource; 0 disables (not advised)
    max_model_len: int
    sagemaker_vllm_tag: str
    sagemaker_ami_version: str  # InferenceAmiVersion for CUDA-13 images; "" to omit
    tags: Mapping[str, str] = field(default_factory=dict)
    # The VPC's Availability Zones by name (context ``azs``); empty = the region's first two,
    # resolved at deploy time. GPU/Neuron types are offered in few AZs: name one that has them.
    azs: tuple[str, ...] = ()
    # Image pipelines (stacks/images.py): the AZ to prefer for the build subnet (None = the first
    # AZ offering the build types, stacks/az_choice.py);
    # an ami-... id to build the Neuron image on instead of the Neuron DLAMI parameter.
    image_az: str | None = None
    neuron_parent_image: str | None = None
    # The Neuron SDK line the inf2/trn1 image is built on (kit/pins.py NEURON_LINES; context
    # ``neuron_sdk``): each line has its own image stack and SSM parameter (kit/image_facts.py).
    neuron_sdk: str = pins.NEURON_DEFAULT_LINE
    # SageMaker: how long cdk deploy waits for InService before failing the stack (it is billed
    # while Creating); stacks/endpoint_ready.py, at most 55 (CustomResource ServiceTimeout).
    sagemaker_ready_minutes: int = 45
    # One more deployment per ``<id>_variants`` item of a selected backend (kit/variants.py):
    # the backend's settings with the variant's model.
    variants: tuple[BackendConfig, ...] = ()
    # The KMS key (ARN) the image recipes encrypt build and test volumes, and so the AMIs, under
    # (``-c image_kms_key``); None = each image stack's own key (stacks/images.py).
    image_kms_key: str | None = None

    @property
    def deployments(self) -> tuple[BackendConfig, ...]:
        """Every backend stack to build: the selected backends, then their variants."""
        return self.backends + self.variants

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region a selected backend uses, the kit's region first."""
        return tuple(dict.fromkeys([self.region, *(b.region for b in self.backends)]))

    @property
    def backend_ids(self) -> tuple[str, ...]:
        return tuple(b.id for b in self.backends)

    def backend(self, backend_id: str) -> BackendConfig | None:
        return next((b for b in self.backends if b.id == backend_id), None)


def _str_list(key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{key}={value!r} is not a comma-separated list")
    if any(not i for i in items):
        raise ConfigError(f"{key}={value!r} has an empty item; give e.g. {key}=g6,inf2")
    return items


def _number(key: str, value: Any, cast: Callable[[Any], Any], lo: float, hi: float) -> Any:
    try:
        if isinstance(value, bool):
            raise ValueError
        n = cast(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a number; valid: {lo:g} to {hi:g}") from None
    if not lo <= n <= hi:
        raise ConfigError(f"{key}={value!r} is out of range; valid: {lo:g} to {hi:g}")
    return n


# The shortest hard time limit a deploy may have. It counts from the deploy's start, and the
# deploy itself waits up to an hour for the backend's first answer (readiness: vLLM images 45 min,
# the Neuron image 60, SageMaker up to sagemaker_ready_minutes, 55): a shorter limit could stop or
# delete a backend before `cdk deploy` returns, billing for one that is never measured.
# harness.run warns, likewise, when less than an hour is left.
MIN_TTL_HOURS = 1.0


def _ttl_hours(value: Any) -> float:
    n = float(_number("ttl_hours", value, float, 0, 720))
    if 0 < n < MIN_TTL_HOURS:
        raise ConfigError(f"ttl_hours={value!r} is under the {MIN_TTL_HOURS:g} hour minimum (a deploy waits up to "
                          "an hour for its backend's first answer, and the limit counts from its start); "
                          f"valid: {MIN_TTL_HOURS:g} to 720, or 0 to disable (not advised)")
    return n


def _instance_type(backend_id: str, key: str, value: Any) -> str:
    b = BACKENDS[backend_id]
    if not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} is not an instance type (e.g. {b.instance_type})")
    problem = b.instance_problem(value) or awsdata.instance_type_problem(value, b.service)
    if problem:  # the catalog's families, then botocore's list: g6.99xlarge has the right shape
        raise ConfigError(f"{key}={value!r}{problem}")
    return value


def _model_id(backend_id: str, key: str, value: Any) -> str:
    """A model id the backend's engine can take as it is put on the instance: a Hugging Face id
    (a `"` broke the readiness check's JSON on the instance, `../` moved the Neuron engine's model
    directory), the package word form (checked by stacks/package.py), or for Bedrock a model or
    inference profile id. No s3:// URI: no engine of the kit loads one directly (a package is how
    a model is served from S3)."""
    b = BACKENDS[backend_id]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}={value!r} is not a model id (e.g. {b.model_id})")
    if not b.open_weights:
        problem = awsdata.bedrock_model_problem(value)
    elif value.startswith("s3://"):
        problem = (" is an S3 URI: no engine of the kit loads one directly; serve a model from S3 as "
                   f"a package ({backend_id}_model=package:<scheme>, docs/package.md) or give a Hugging Face id")
    elif re.fullmatch(r"package(:[a-z0-9_-]{1,32})?", value):
        problem = None
    else:
        problem = awsdata.hf_repo_id_problem(value)
    if problem:
        raise ConfigError(f"{key}={value!r}{problem} (e.g. {b.model_id})")
    return value


def _image_choice(backend_id: str, value: Any) -> str:
    choices = dict(BACKENDS[backend_id].image_choices)
    if value not in choices:
        valid = ", ".join(f"{word} ({what})" for word, what in choices.items())
        raise ConfigError(f"{backend_id}_image={value!r}; valid: {valid}")
    return value


_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")  # EC2 image ids: 8 or 17 hex digits


# A KMS key ARN (KMS API Reference, DescribeKey KeyId: "arn:aws:kms:us-east-2:111122223333:key/
# 1234abcd-12ab-34cd-56ef-1234567890ab"; a multi-Region key's id is mrk- and 32 hex digits,
# "mrk-1234abcd12ab34cd56ef1234567890ab", same model). No alias ARN: an alias can be moved to
# another key, and the AMIs are encrypted under the key, not the alias.
_KMS_KEY_ARN = re.compile(r"^arn:(aws[a-z-]*):kms:([a-z0-9-]+):([0-9]{12}):key/"
                          r"(mrk-[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


def _image_kms_key(value: Any, image_regions: tuple[str, ...]) -> str | None:
    """``-c image_kms_key``: a KMS key ARN, in the region of every image stack the configuration
    builds (a KMS key is regional: a recipe in another region cannot use it)."""
    if value is None or value == "":
        return None
    m = _KMS_KEY_ARN.match(value) if isinstance(value, str) else None
    if m is None:
        raise ConfigError(f"image_kms_key={value!r} is not a KMS key ARN "
                          "(arn:aws:kms:<region>:<account>:key/<key id>, e.g. "
                          "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab)")
    key_region = m.group(2)
    problem = awsdata.region_problem(key_region)
    if problem:
        raise ConfigError(f"image_kms_key={value!r}: {key_region!r}{problem}")
    elsewhere = [r for r in image_regions if r != key_region]
    if elsewhere:
        raise ConfigError(f"image_kms_key={value!r} is a key in {key_region}, but the configuration builds "
                          f"images in {', '.join(elsewhere)} too (a KMS key is regional); give a key there, "
                          "or leave image_kms_key out and each image stack makes its own")
    return value


def _ami(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _AMI_ID.match(value):
        raise ConfigError(f"{key}={value!r} is not an AMI id (ami- and 8 or 17 hex digits, e.g. ami-0123456789abcdef0)")
    return value


KNOWN_KEYS = {
    "region", "backends", "model", "hf_token_secret", "idle_stop_minutes",
    "ttl_hours", "max_model_len", "sagemaker_vllm_tag", "sagemaker_ami_version",
    "tags", "azs", "image_az", "neuron_parent_image", "neuron_sdk", "sagemaker_ready_minutes",
    "model_revision", "image_kms_key",
    *(f"{b}_model_revision" for b in BACKEND_IDS if BACKENDS[b].open_weights),
    *(f"{b}_az" for b in BACKEND_IDS if BACKENDS[b].service == "ec2"),
    *(f"{b}_instance_type" for b in BACKEND_IDS if BACKENDS[b].instance_type),
    *(f"{b}_instance_types" for b in BACKEND_IDS if BACKENDS[b].service == "sagemaker"),
    *(f"{b}_image" for b in BACKEND_IDS if BACKENDS[b].image_choices),
    *(f"{b}_ami" for b in BACKEND_IDS if BACKENDS[b].service == "ec2"),
    *(f"{b}_model" for b in BACKEND_IDS),
    *(kit_variants.key(b) for b in kit_variants.backends_with_variants()),
    *(kit_regions.region_key(b) for b in BACKEND_IDS),
}

DEFAULTS: dict[str, Any] = {
    "region": kit_regions.DEFAULT_REGION,
    "backends": ",".join(BACKEND_IDS),
    "hf_token_secret": "inference-kit/hf-token",
    "idle_stop_minutes": 60,
    "ttl_hours": 8,
    "max_model_len": 4096,
    # ~9 min to InService in the seed; 20 of 21 endpoints in a public reproduction took <= 11.3 min.
    "sagemaker_ready_minutes": 45,
    # A published tag (kit/dlc.py PUBLISHED_SAGEMAKER_TAGS: the DLC's docs data
    # docs/src/data/vllm/0.31.0-gpu-sagemaker.yml, commit 8c7b4b1d; Ubuntu 24.04 base since 0.28,
    # CUDA 13.0, hence the al2023 GPU 4-1 inference AMI below; tests/kit/test_dlc.py).
    "sagemaker_vllm_tag": "0.31.0-gpu-py312-cu130-ubuntu24.04-sagemaker",
    "sagemaker_ami_version": "al2023-ami-sagemaker-inference-gpu-4-1",  # CUDA 13 images (cfn-lint schema enum)
}


# The kit's keys are snake_case; CDK's own context keys carry "@", ":" or "-" (feature flags,
# lookups, cli-telemetry), so a snake_case key the kit does not know is a typo: refusing it keeps
# `-c backend=g6` from silently synthesizing all six backends, or `-c ttl_hour=1` the default TTL.
_KIT_SHAPED = re.compile(r"^[a-z][a-z0-9_]*$")
# InferenceAmiVersion names (SageMaker API enum, e.g. al2-ami-sagemaker-inference-gpu-3-1).
_AMI_VERSION = re.compile(r"^al2(023)?-ami-sagemaker-inference-(gpu|neuron)-[0-9]+(-[0-9]+)*$")


def check_keys(context: Mapping[str, Any]) -> None:
    unknown = sorted(k for k in context if _KIT_SHAPED.match(k) and k not in KNOWN_KEYS)
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
        hint = f"did you mean {near[0]!r}?" if near else f"valid: {', '.join(sorted(KNOWN_KEYS))}"
        raise ConfigError(f"unknown context key {key!r}; {hint}")


def parse(context: Mapping[str, Any]) -> KitConfig:
    """Validate the kit's context keys (CDK's own keys, which are not snake_case, pass through)."""
    check_keys(context)
    get = lambda k: context.get(k, DEFAULTS.get(k))  # noqa: E731

    try:  # the one region resolution (deploy, discovery, preflight, cost, lint)
        where = kit_regions.resolve(context=context)
    except kit_regions.RegionError as e:
        raise ConfigError(str(e)) from None
    region = where.region

    ids = _str_list("backends", get("backends"))
    for i in ids:
        if i not in BACKENDS:
            raise ConfigError(f"backends: unknown backend {i!r}; valid: {', '.join(BACKEND_IDS)}")
    ids = [b for b in BACKEND_IDS if b in ids]  # catalog order, no duplicates

    azs: tuple[str, ...] = ()
    if context.get("azs"):
        azs = tuple(_str_list("azs", context["azs"]))
        for az in azs:  # names cfn-lint's table lists for the region (kit/awsdata.py)
            problem = awsdata.az_problem(az, region)
            if problem:
                raise ConfigError(f"azs: {az!r}{problem}")
        if len(set(azs)) != len(azs):
            raise ConfigError(f"azs={context['azs']!r} names an Availability Zone twice")

    # A bad choice is refused even for a backend not selected (a typo should not wait for the day
    # the backend is).
    choices = {bid: _image_choice(bid, context.get(f"{bid}_image", BACKENDS[bid].image_choices[0][0]))
               for bid in BACKEND_IDS if BACKENDS[bid].image_choices}

    # Every <id>_ami is checked, selected or not (a typo should not wait for the day it is).
    for bid in BACKEND_IDS:
        if BACKENDS[bid].service == "ec2":
            _ami(f"{bid}_ami", context.get(f"{bid}_ami"))

    default_model = context.get("model")
    backends = []
    for bid in ids:
        b = BACKENDS[bid]
        key = f"{bid}_model" if context.get(f"{bid}_model") else "model"
        model = _model_id(bid, key, context.get(f"{bid}_model") or (default_model if b.open_weights else None)
                          or b.model_id)
        itype = None
        itypes: tuple[str, ...] = ()
        if b.instance_type:
            key = f"{bid}_instance_type"
            itype = _instance_type(bid, key, context.get(key, b.instance_type))
            sweep = f"{bid}_instance_types"  # one endpoint per type: the SageMaker GPU-family sweep
            if b.service == "sagemaker" and sweep in context:
                itypes = tuple(_instance_type(bid, sweep, t) for t in _str_list(sweep, context[sweep]))
                twice = next((t for i, t in enumerate(itypes) if t in itypes[:i]), None)
                if twice:  # one endpoint per type: a second one would be the same construct twice
                    raise ConfigError(f"{sweep}={context[sweep]!r} names {twice} twice; give each type once")
                itype = itypes[0]
            elif b.service == "sagemaker":
                itypes = (itype,)
        where_b = where.of(bid)
        if b.service == "sagemaker":  # the vLLM container comes from the region's DLC registry
            try:
                dlc.dlc_account(where_b)
            except dlc.DlcRegionError as e:
                key = kit_regions.region_key(bid) if bid in where.overrides else "region"
                raise ConfigError(f"{key}={where_b!r}: {e}") from None
        # A preference: the deploy checks that the AZ offers the type (stacks/az_choice.py) and
        # builds the backend's subnet there; without it, the first AZ that offers the type.
        az = context.get(f"{bid}_az")
        if az is not None and b.service == "ec2":
            problem = awsdata.az_problem(az, where_b, f", where {bid} deploys") if isinstance(az, str) \
                else " is not a string"
            if problem:
                raise ConfigError(f"{bid}_az={az!r}{problem}")
        ami = _ami(f"{bid}_ami", context.get(f"{bid}_ami")) if b.service == "ec2" else None
        backends.append(BackendConfig(bid, itype, model, itypes, az if b.service == "ec2" else None,
                                      choices.get(bid), where_b, ami=ami))

    variants = _variants(context, {b.id: b for b in backends})
    backends, variants = _pin_revisions(context, backends, variants)
    # Every EC2 stack's subnet block is declared in its catalog row (kit/subnets.py): a row
    # without one, or more variants than its row declares blocks for, is refused here.
    ec2_ids = [b.id for b in backends if BACKENDS[b.id].service == "ec2"]
    plan = subnets.problems(ec2_ids)
    if plan:
        raise ConfigError(plan[0])
    for bid in dict.fromkeys(v.id for v in variants if v.id in ec2_ids):
        n, room = sum(v.id == bid for v in variants), subnets.variant_room(bid)
        if n > room:
            raise ConfigError(f"{kit_variants.key(bid)}: {n} variants, but kit/catalog.py declares subnet blocks "
                              f"for {room} ({bid} subnet_blocks: the stack's, then one per variant); free blocks: "
                              f"{', '.join(map(str, subnets.free_blocks())) or 'none'}")

    secret = get("hf_token_secret")
    if not isinstance(secret, str) or not _SECRET_NAME.match(secret):
        raise ConfigError(f"hf_token_secret={secret!r} is not a Secrets Manager secret name "
                          "(letters, digits and /_+=.@-)")
    tag = get("sagemaker_vllm_tag")
    if not isinstance(tag, str) or not _VLLM_TAG.match(tag):
        raise ConfigError(f"sagemaker_vllm_tag={tag!r} is not an image tag (e.g. {DEFAULTS['sagemaker_vllm_tag']})")
    ami_version = get("sagemaker_ami_version")
    if not isinstance(ami_version, str) or (ami_version and not _AMI_VERSION.match(ami_version)):
        raise ConfigError(f"sagemaker_ami_version={ami_version!r} is not an inference AMI version "
                          f"(e.g. {DEFAULTS['sagemaker_ami_version']}, or '' to omit)")

    image_az = context.get("image_az")
    if image_az is not None:
        problem = awsdata.az_problem(image_az, region) if isinstance(image_az, str) else " is not a string"
        if problem:
            raise ConfigError(f"image_az={image_az!r}{problem}")
    neuron_parent = context.get("neuron_parent_image")
    if neuron_parent is not None and not (isinstance(neuron_parent, str)
                                          and re.fullmatch(r"ami-[0-9a-f]{8,17}", neuron_parent)):
        raise ConfigError(f"neuron_parent_image={neuron_parent!r} is not an AMI id (e.g. ami-0123456789abcdef0)")

    neuron_sdk = context.get("neuron_sdk", pins.NEURON_DEFAULT_LINE)
    if not isinstance(neuron_sdk, str) or neuron_sdk not in pins.NEURON_LINES:
        valid = "; ".join(f"{ln} ({pins.NEURON_LINES[ln].status})" for ln in pins.NEURON_LINES)
        raise ConfigError(f"neuron_sdk={neuron_sdk!r} is not a Neuron SDK line the kit builds; valid: {valid}")

    tags = context.get("tags", {})
    if not isinstance(tags, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise ConfigError(f"tags={tags!r} must be an object of string keys and values")
    for k in tags:  # EC2 backends expose instance tags through IMDS, which restricts the keys
        if not re.fullmatch(r"[A-Za-z0-9+\-=._:@]{1,128}", k) or k.startswith("aws:"):
            raise ConfigError(f"tags: key {k!r} is not allowed; use letters, digits and + - = . _ : @ "
                              "(no spaces or /, no aws: prefix)")

    # Image stacks exist where a selected EC2 backend boots an image family (stacks/wiring.py,
    # stacks/images.py image_specs).
    image_regions = tuple(dict.fromkeys(bc.region for bc in backends if BACKENDS[bc.id].image))
    image_kms_key = _image_kms_key(context.get("image_kms_key"), image_regions)

    return KitConfig(
        region=region,
        backends=tuple(backends),
        hf_token_secret=secret,
        idle_stop_minutes=int(_number("idle_stop_minutes", get("idle_stop_minutes"), int, 0, 1440)),
        ttl_hours=_ttl_hours(get("ttl_hours")),
        max_model_len=int(_number("max_model_len", get("max_model_len"), int, 256, 131072)),
        sagemaker_vllm_tag=tag,
        sagemaker_ami_version=ami_version,
        tags=dict(tags),
        azs=azs,
        image_az=image_az,
        neuron_parent_image=neuron_parent,
        neuron_sdk=neuron_sdk,
        sagemaker_ready_minutes=int(_number("sagemaker_ready_minutes", get("sagemaker_ready_minutes"), int, 15, 55)),
        variants=variants,
        image_kms_key=image_kms_key,
    )


def _variant_model(backend_id: str, key: str, value: Any) -> str:
    """A variant's model, checked as ``<id>_model`` is, and a package scheme the backend serves
    (stacks/package.py checks the backend's own model at synth; a variant is refused here)."""
    model = _model_id(backend_id, key, value)
    from kit.schemes import MODEL_WORD, SCHEMES, scheme_of_model

    try:
        scheme = scheme_of_model(model)
    except ValueError:
        raise ConfigError(f"{key}={model!r}: unknown package scheme; valid: "
                          f"{', '.join(f'{MODEL_WORD}:{s}' for s in SCHEMES)}") from None
    if scheme and not BACKENDS[backend_id].loads_packages:
        able = ", ".join(b.id for b in BACKENDS.values() if b.loads_packages)
        raise ConfigError(f"{key}={model!r}: packages are served by {able} only")
    return model


def _variants(context: Mapping[str, Any], selected: Mapping[str, BackendConfig]) -> tuple[BackendConfig, ...]:
    """``<id>_variants`` of every backend checked (a typo should not wait for the day the backend
    is selected); deployments made for the selected backends only, in catalog order."""
    out: list[BackendConfig] = []
    for bid in BACKEND_IDS:
        k = kit_variants.key(bid)
        if context.get(k) in (None, "", {}):
            continue
        if bid not in kit_variants.backends_with_variants():
            raise ConfigError(f"{k}: {bid} takes no variants (its model is not configuration); valid: "
                              f"{', '.join(map(kit_variants.key, kit_variants.backends_with_variants()))}")
        try:
            items = kit_variants.parse(bid, context[k])
        except kit_variants.VariantError as e:
            raise ConfigError(str(e)) from None
        base = selected.get(bid)
        for slot, item in enumerate(items):
            where = f"{k}[{item.name}]"
            # An item without a model serves the backend's own (its <id>_model or model).
            model = _variant_model(bid, where, item.model) if item.model else (base.model_id if base else None)
            # An item with @TYPE: the same checks as <id>_instance_type (the catalog's rules and
            # botocore's list); the planner's fit for its model is checked at synth (stacks/sizing.py).
            itype = _instance_type(bid, where, item.instance_type) if item.instance_type else None
            if base is None:
                continue
            if itype is None:
                out.append(replace(base, model_id=model, variant=item.name, slot=slot))
            else:
                out.append(replace(base, model_id=model, variant=item.name, slot=slot, instance_type=itype,
                                   instance_types=(itype,) if base.instance_types else ()))
    return tuple(out)


def _revision(key: str, value: Any) -> str:
    problem = kit_weights.revision_problem(value)
    if problem:
        raise ConfigError(f"{key}={value!r}{problem}")
    return value.lower()


def _repo_revisions(context: Mapping[str, Any], served: Mapping[str, list[str]],
                    configured: set[str]) -> dict[str, str]:
    """``model_revision`` as repository -> commit. One commit pins the repository ``-c model``
    names, or else the one repository every selected open-weights deployment serves; ``REPO=SHA,...``
    (or a JSON object) pins each repository named, each of which some backend must serve."""
    raw = context.get("model_revision")
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, str) and "=" not in raw:
        sha = _revision("model_revision", raw.strip())
        if isinstance(context.get("model"), str) and context["model"]:
            return {_repo(context["model"]): sha}
        if len(served) > 1:
            which = "; ".join(f"{repo} ({', '.join(ids)})" for repo, ids in served.items())
            raise ConfigError(f"model_revision={raw!r} pins one repository, but the selected backends serve "
                              f"{len(served)}: {which}; give REPO=SHA,... or <id>_model_revision per backend, "
                              "or -c model for all")
        return {repo: sha for repo in served}
    if isinstance(raw, Mapping):
        items = [(str(k), v) for k, v in raw.items()]
    elif isinstance(raw, str):
        items = [(r.strip(), v.strip()) for r, _, v in (i.partition("=") for i in _str_list("model_revision", raw))]
    else:
        raise ConfigError(f"model_revision={raw!r} is not a commit id or REPO=SHA,... pairs")
    out: dict[str, str] = {}
    for repo, sha in items:
        problem = awsdata.hf_repo_id_problem(repo)
        if problem:
            raise ConfigError(f"model_revision: {repo!r}{problem}")
        if repo not in configured:
            raise ConfigError(f"model_revision: no backend serves {repo!r} (configured: "
                              f"{', '.join(sorted(configured)) or 'none'}); a package pins its source repository")
        out[repo] = _revision(f"model_revision[{repo}]", sha)
    return out


def _repo(model_id: str) -> str:
    """kit/weights.py weights_repo, or the id itself for a package scheme that does not exist
    (refused in its own line by stacks/package.py)."""
    try:
        return kit_weights.weights_repo(model_id)
    except ValueError:
        return model_id


def _pin_revisions(context: Mapping[str, Any], backends: list[BackendConfig],
                   variants: tuple[BackendConfig, ...]) -> tuple[list[BackendConfig], tuple[BackendConfig, ...]]:
    """Each deployment with the commit of its weights' repository (kit/weights.py weights_repo):
    ``<id>_model_revision`` for the backend and its variants of the same repository, else
    ``model_revision`` for that repository, else None (the newest at deploy time). Every
    ``<id>_model_revision`` is checked, selected or not."""
    own = {bid: _revision(f"{bid}_model_revision", context[f"{bid}_model_revision"])
           for bid in BACKEND_IDS if BACKENDS[bid].open_weights and context.get(f"{bid}_model_revision")}
    open_deps = [d for d in (*backends, *variants) if BACKENDS[d.id].open_weights]
    served: dict[str, list[str]] = {}
    for d in open_deps:
        if d.id in own and _repo(d.model_id) == _repo(
                next(b.model_id for b in backends if b.id == d.id)):
            continue  # pinned by its own key
        served.setdefault(_repo(d.model_id), []).append(
            d.id if d.variant is None else kit_variants.endpoint_name(d.id, d.variant))
    default_model = context.get("model")
    configured = {_repo(d.model_id) for d in open_deps}
    for bid in BACKEND_IDS:  # an unselected backend's model counts too (a pin is not a typo because of -c backends)
        b = BACKENDS[bid]
        if b.open_weights:
            m = context.get(f"{bid}_model") or default_model or b.model_id
            if isinstance(m, str):
                configured.add(_repo(m))
    by_repo = _repo_revisions(context, served, configured)
    base_repo = {b.id: _repo(b.model_id) for b in backends if BACKENDS[b.id].open_weights}

    def pin(d: BackendConfig) -> BackendConfig:
        if not BACKENDS[d.id].open_weights:
            return d
        repo = _repo(d.model_id)
        rev = own.get(d.id) if d.id in own and repo == base_repo.get(d.id) else by_repo.get(repo)
        return replace(d, model_revision=rev)

    backends, variants = [pin(b) for b in backends], tuple(pin(v) for v in variants)
    # A package is one build (stacks/package.py): its deployments may not pin two source commits.
    pins: dict[str, dict[str, str]] = {}
    for d in (*backends, *variants):
        s = _scheme(d.model_id) if BACKENDS[d.id].open_weights else None
        if s and d.model_revision:
            pins.setdefault(s.name, {})[d.model_revision] = kit_variants.endpoint_name(d.id, d.variant) \
                if d.variant else d.id
    for scheme, revs in pins.items():
        if len(revs) > 1:
            raise ConfigError(f"package:{scheme} is one build but is pinned to {len(revs)} source commits ("
                              + ", ".join(f"{who}: {sha}" for sha, who in revs.items())
                              + "); pin one with model_revision")
    return backends, variants


def _scheme(model_id: str):
    from kit.schemes import scheme_of_model

    try:
        return scheme_of_model(model_id)
    except ValueError:
        return None


def package_revisions(config: KitConfig, region: str | None = None) -> dict[str, str]:
    """Package scheme -> the source commit its build must use (the pin of the deployments serving
    it, in ``region`` when given; parse refused two pins for one scheme)."""
    out: dict[str, str] = {}
    for d in config.deployments:
        if region is not None and d.region != region:
            continue
        s = _scheme(d.model_id) if BACKENDS[d.id].open_weights else None
        if s and d.model_revision:
            out[s.name] = d.model_revision
    return out
