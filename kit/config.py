"""cdk.json context parsed once into typed, validated config.

Every backend fact comes from the catalog (kit/catalog.py): the backend ids and the context
keys named after them, which instance types a backend accepts (``Backend.instance_problem``:
service, architecture, families, NeuronCore count), whether ``-c model`` applies
(``open_weights``), which backend takes a list of SageMaker types (``service``), the boot-image
choices (``image_choices``) and the defaults. Nothing here names a backend id.

The keys are one table, ``KEYS``: a row per key, or per family of keys named after catalog rows
(``<id>_az`` for each EC2 row), with its default, the reader that turns the raw value into the
typed one, and the line docs/stacks.md shows (kit/config_doc.py renders it). ``parse`` reads the
rows in order, then checks what spans keys; ``check_keys`` refuses a key no row names.

Every problem is a ``ConfigError`` whose message is one line naming the bad value and what would
be valid; ``app.py`` prints it and exits non-zero, so ``cdk synth`` never shows a traceback for
bad input. No aws-cdk-lib import here: the harness and tests can validate config without jsii.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from kit import pins
from kit import awsdata, dlc, subnets
from kit import weights as kit_weights
from kit import regions as kit_regions
from kit import variants as kit_variants
from kit.catalog import BACKEND_IDS, BACKENDS, Backend
from kit.errors import KitError


class ConfigError(KitError, ValueError):
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




_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")  # EC2 image ids: 8 or 17 hex digits


# A KMS key ARN (KMS API Reference, DescribeKey KeyId: "arn:aws:kms:us-east-2:111122223333:key/
# 1234abcd-12ab-34cd-56ef-1234567890ab"; a multi-Region key's id is mrk- and 32 hex digits,
# "mrk-1234abcd12ab34cd56ef1234567890ab", same model). No alias ARN: an alias can be moved to
# another key, and the AMIs are encrypted under the key, not the alias.
_KMS_KEY_ARN = re.compile(r"^arn:(aws[a-z-]*):kms:([a-z0-9-]+):([0-9]{12}):key/"
                          r"(mrk-[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


def _image_kms_key(value: Any, image_regions: tuple[str, ...]) -> str | None:
    """``-c image_kms_key``: a KMS key ARN, in the region of every image stack the configuration
    builds (a KMS key is regional: a recipe in another region cannot use it). Image stacks exist
    where a selected EC2 backend boots an image family (stacks/wiring.py, stacks/images.py
    image_specs)."""
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


# ---------------------------------------------------------------------------------------------
# The keys table: one row per context key, or per family of keys named after catalog rows
# (``<id>_az``: one key per EC2 row). ``parse`` reads the rows in this order, each row's reader
# turning the raw context value (or the row's default) into the typed value or raising
# ConfigError; ``check_keys`` refuses a key no row names; kit/config_doc.py renders the rows as the
# context-key table of docs/stacks.md.
# ---------------------------------------------------------------------------------------------

ID = "<id>"  # a family row's name holds it where each catalog id goes


@dataclass(frozen=True)
class At:
    """What a reader sees besides the raw value: the key it reads, the catalog row a family's key
    is named after, the whole context and the values read before it (by key, in table order)."""

    key: str
    backend: Backend | None
    context: Mapping[str, Any]
    got: Mapping[str, Any]

    @property
    def given(self) -> bool:
        return self.key in self.context


Reader = Callable[[Any, At], Any]


@dataclass(frozen=True)
class Key:
    """One context key, or (``has`` set) the family ``<id>_suffix`` of the catalog rows ``has``
    accepts. ``default`` is the raw value an absent key reads as (a family's may be a function of
    its catalog row); ``shown`` is how the docs show it (None: the default itself); ``doc`` is the
    docs' one-line meaning. ``selected``: a family read for the selected backends only (the others
    are not checked, as before the table existed)."""

    name: str
    read: Reader
    doc: str | Callable[[tuple[Backend, ...]], str]
    default: Any = None
    shown: str | Callable[[tuple[Backend, ...]], str] | None = None
    has: Callable[[Backend], bool] | None = None
    selected: bool = False

    def rows(self) -> tuple[Backend, ...]:
        """A family's catalog rows, in catalog order; () for a single key."""
        return tuple(b for b in BACKENDS.values() if self.has(b)) if self.has else ()

    def key(self, backend_id: str) -> str:
        return self.name.replace(ID, backend_id)

    def keys(self) -> tuple[str, ...]:
        """Every context key the row accepts."""
        return tuple(self.key(b.id) for b in self.rows()) if self.has else (self.name,)

    def targets(self, got: Mapping[str, Any]) -> list[tuple[str, Backend | None]]:
        """The keys to read now: a ``selected`` family's for the backends ``got["backends"]`` names."""
        if self.has is None:
            return [(self.name, None)]
        return [(self.key(b.id), b) for b in self.rows() if not self.selected or b.id in got["backends"]]

    def default_for(self, backend: Backend | None) -> Any:
        return self.default(backend) if callable(self.default) else self.default


def _region(raw: Any, at: At) -> str:
    """``region`` and ``<id>_region`` as kit.regions.resolve reads them (the one region
    resolution: deploy, discovery, preflight, cost, lint): absent (or null), the default region,
    and for a backend the kit's."""
    if raw is None:
        return at.got.get("region", kit_regions.DEFAULT_REGION)
    try:
        return kit_regions.check_region(at.key, raw)
    except kit_regions.RegionError as e:
        raise ConfigError(str(e)) from None


def _backends(raw: Any, at: At) -> tuple[str, ...]:
    ids = _str_list(at.key, raw)
    for i in ids:
        if i not in BACKENDS:
            raise ConfigError(f"backends: unknown backend {i!r}; valid: {', '.join(BACKEND_IDS)}")
    return tuple(b for b in BACKEND_IDS if b in ids)  # catalog order, no duplicates


def _azs(raw: Any, at: At) -> tuple[str, ...]:
    if not raw:
        return ()
    azs = tuple(_str_list(at.key, raw))
    for az in azs:  # names cfn-lint's table lists for the region (kit/awsdata.py)
        problem = awsdata.az_problem(az, at.got["region"])
        if problem:
            raise ConfigError(f"azs: {az!r}{problem}")
    if len(set(azs)) != len(azs):
        raise ConfigError(f"azs={raw!r} names an Availability Zone twice")
    return azs


def _image_choice(raw: Any, at: At) -> str:
    choices = dict(at.backend.image_choices)
    if raw not in choices:
        valid = ", ".join(f"{word} ({what})" for word, what in choices.items())
        raise ConfigError(f"{at.key}={raw!r}; valid: {valid}")
    return raw


def _backend_model(raw: Any, at: At) -> str:
    """``<id>_model``, else (open weights) ``model``, else the catalog's; an error names the key
    the value came from."""
    b = at.backend
    if raw:
        return _model_id(b.id, at.key, raw)
    return _model_id(b.id, "model", (at.got["model"] if b.open_weights else None) or b.model_id)


def _instance_types(raw: Any, at: At) -> tuple[str, ...]:
    """One endpoint per type (the SageMaker GPU-family sweep); absent, ``<id>_instance_type``."""
    bid = at.backend.id
    if not at.given:
        return (at.got[f"{bid}_instance_type"],)
    itypes = tuple(_instance_type(bid, at.key, t) for t in _str_list(at.key, raw))
    twice = next((t for i, t in enumerate(itypes) if t in itypes[:i]), None)
    if twice:  # one endpoint per type: a second one would be the same construct twice
        raise ConfigError(f"{at.key}={raw!r} names {twice} twice; give each type once")
    return itypes


def _az(raw: Any, at: At) -> str | None:
    """A preference: the deploy checks that the AZ offers the type (stacks/az_choice.py) and
    builds the subnet there; absent, the first AZ that offers the type."""
    if raw is None:
        return None
    region = at.got[f"{at.backend.id}_region"] if at.backend else at.got["region"]
    where = f", where {at.backend.id} deploys" if at.backend else ""
    problem = awsdata.az_problem(raw, region, where) if isinstance(raw, str) else " is not a string"
    if problem:
        raise ConfigError(f"{at.key}={raw!r}{problem}")
    return raw


def _variant_items(raw: Any, at: At) -> tuple[kit_variants.Item, ...]:
    """``<id>_variants`` of every backend checked (a typo should not wait for the day the backend
    is selected): each item's model as ``<id>_model`` is, its @TYPE as ``<id>_instance_type`` is
    (the catalog's rules and botocore's list; the planner's fit for its model is checked at synth,
    stacks/sizing.py). The deployments are made after the loop, for the selected backends."""
    if raw in (None, "", {}):
        return ()
    bid = at.backend.id
    try:
        items = kit_variants.parse(bid, raw)
    except kit_variants.VariantError as e:
        raise ConfigError(str(e)) from None
    for item in items:
        where = f"{at.key}[{item.name}]"
        if item.model:
            _variant_model(bid, where, item.model)
        if item.instance_type:
            _instance_type(bid, where, item.instance_type)
    return items


def _model_revision(raw: Any, at: At) -> Any:
    """One commit or REPO=SHA,... pairs (or a JSON object); which repositories they pin is
    checked after the loop, against what the selected deployments serve (``_repo_revisions``)."""
    if raw is None or isinstance(raw, (str, Mapping)):
        return raw
    raise ConfigError(f"model_revision={raw!r} is not a commit id or REPO=SHA,... pairs")


def _secret_name(raw: Any, at: At) -> str:
    if not isinstance(raw, str) or not _SECRET_NAME.match(raw):
        raise ConfigError(f"{at.key}={raw!r} is not a Secrets Manager secret name "
                          "(letters, digits and /_+=.@-)")
    return raw


def _vllm_tag(raw: Any, at: At) -> str:
    if not isinstance(raw, str) or not _VLLM_TAG.match(raw):
        raise ConfigError(f"{at.key}={raw!r} is not an image tag (e.g. {DEFAULTS['sagemaker_vllm_tag']})")
    return raw


def _ami_version(raw: Any, at: At) -> str:
    if not isinstance(raw, str) or (raw and not _AMI_VERSION.match(raw)):
        raise ConfigError(f"{at.key}={raw!r} is not an inference AMI version "
                          f"(e.g. {DEFAULTS['sagemaker_ami_version']}, or '' to omit)")
    return raw


def _parent_image(raw: Any, at: At) -> str | None:
    if raw is not None and not (isinstance(raw, str) and re.fullmatch(r"ami-[0-9a-f]{8,17}", raw)):
        raise ConfigError(f"{at.key}={raw!r} is not an AMI id (e.g. ami-0123456789abcdef0)")
    return raw


def _neuron_sdk(raw: Any, at: At) -> str:
    if not isinstance(raw, str) or raw not in pins.NEURON_LINES:
        valid = "; ".join(f"{ln} ({pins.NEURON_LINES[ln].status})" for ln in pins.NEURON_LINES)
        raise ConfigError(f"{at.key}={raw!r} is not a Neuron SDK line the kit builds; valid: {valid}")
    return raw


def _tags(raw: Any, at: At) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ConfigError(f"{at.key}={raw!r} must be an object of string keys and values")
    for k in raw:  # EC2 backends expose instance tags through IMDS, which restricts the keys
        if not re.fullmatch(r"[A-Za-z0-9+\-=._:@]{1,128}", k) or k.startswith("aws:"):
            raise ConfigError(f"tags: key {k!r} is not allowed; use letters, digits and + - = . _ : @ "
                              "(no spaces or /, no aws: prefix)")
    return dict(raw)


def _kms_key(raw: Any, at: At) -> str | None:
    got = at.got
    return _image_kms_key(raw, tuple(dict.fromkeys(got[f"{b}_region"] for b in got["backends"]
                                                   if BACKENDS[b].image)))


def _whole(lo: int, hi: int) -> Reader:
    return lambda raw, at: int(_number(at.key, raw, int, lo, hi))


def _per_row(rows: tuple[Backend, ...], text: Callable[[Backend], str]) -> str:
    """A docs cell for a family: the one text all its rows share, else each row's with its id."""
    texts = {b.id: text(b) for b in rows}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return ", ".join(f"{t} ({bid})" for bid, t in texts.items())


def _by_arch(rows: tuple[Backend, ...]) -> str:
    """``x86_64 for sagemaker, g6, ...; arm64 for g5g``: the CPU architecture each row's types have."""
    ids: dict[str, list[str]] = {}
    for b in rows:
        if b.hardware:
            ids.setdefault(b.hardware.arch, []).append(b.id)
    return "; ".join(f"{arch} for {', '.join(bids)}" for arch, bids in ids.items())


def _neuron_ids() -> str:
    """How the docs name the Neuron backends: ``inf2/trn1``."""
    return "/".join(b.id for b in BACKENDS.values() if b.engine_kind == "neuron")


def _open(b: Backend) -> bool:
    return b.open_weights


def _ec2(b: Backend) -> bool:
    return b.service == "ec2"


KEYS: tuple[Key, ...] = (
    Key("region", _region, "every stack's region (kit/regions.py; the shell's AWS_REGION is not used)",
        default=kit_regions.DEFAULT_REGION),
    Key(kit_regions.region_key(ID), _region, "move one backend to another region, with its own network stack there",
        shown="the kit's region", has=lambda b: True),
    Key("backends", _backends, "comma list of catalog ids (`kit/catalog.py`); only these stacks (and what they "
        "need) are synthesized", default=",".join(BACKEND_IDS), shown="every catalog row"),
    Key("azs", _azs, "the AZs of NetworkStack's own subnets (the Instance Connect Endpoint's)",
        shown="first two AZs of the region"),
    # A bad choice is refused even for a backend not selected (a typo should not wait for the day
    # the backend is).
    Key(f"{ID}_image", _image_choice,
        lambda rows: "the boot image: " + _per_row(rows, lambda b: ", ".join(
            f"`{word}` ({what})" for word, what in b.image_choices)),
        default=lambda b: b.image_choices[0][0], shown=lambda rows: _per_row(rows, lambda b: f"`{b.image_choices[0][0]}`"),
        has=lambda b: bool(b.image_choices)),
    # Every <id>_ami is checked, selected or not (a typo should not wait for the day it is).
    Key(f"{ID}_ami", lambda raw, at: _ami(at.key, raw),
        "an AMI id to boot instead of the image's parameter (ami- and 8 or 17 hex digits): an image another "
        "account shared, or one of this account's; the deploy checks it is visible and available "
        "(Custom::ImagesReady) before the instance is created",
        shown="none (the image's SSM parameter)", has=_ec2),
    Key("model", lambda raw, at: raw, "model id for every self-hosted backend (open weights); `<id>_model` "
        "overrides it for one", shown="catalog"),
    Key(f"{ID}_model", _backend_model,
        lambda rows: "model id for one backend: a Hugging Face id (`NAME` or `NAMESPACE/NAME`) or "
        "`package[:<scheme>]` ([package.md](package.md)); "
        + ", ".join(f"`{b.id}_model`" for b in rows if not b.open_weights)
        + ": a Bedrock model or inference profile id",
        shown="`model`, else catalog", has=lambda b: True, selected=True),
    Key(f"{ID}_instance_type", lambda raw, at: _instance_type(at.backend.id, at.key, raw),
        lambda rows: "checked against the catalog row's instance families and its image's CPU architecture ("
        + _by_arch(rows)
        + "), and against botocore's list of types", default=lambda b: b.instance_type,
        shown=lambda rows: "catalog: " + _per_row(rows, lambda b: f"`{b.instance_type}`"),
        has=lambda b: bool(b.instance_type), selected=True),
    Key(f"{ID}_instance_types", _instance_types, "one endpoint per type (each type once)",
        shown=lambda rows: _per_row(rows, lambda b: f"`{b.id}_instance_type`"),
        has=lambda b: b.service == "sagemaker" and bool(b.instance_type), selected=True),
    Key(f"{ID}_az", _az, "a preferred AZ for the backend's own subnet; the deploy checks it offers the type "
        "and fails in one line listing those that do", shown="the first AZ that offers the type",
        has=_ec2, selected=True),
    Key(kit_variants.key(ID), _variant_items,
        "the backend once more per item: `NAME=MODEL`, `NAME=MODEL@TYPE` or `NAME=@TYPE`, comma-separated "
        "(a JSON object in cdk.json); [Precisions side by side](#precisions-side-by-side-variants)",
        shown="none", has=_open),
    # Every <id>_model_revision is checked, selected or not.
    Key(f"{ID}_model_revision", lambda raw, at: _revision(at.key, raw) if raw else None,
        "one backend's commit (40 hex characters), and its variants' of the same repository",
        shown="`model_revision`", has=_open),
    Key("model_revision", _model_revision,
        "the commit of the weights to serve (40 hex characters): one commit pins the repository `model` names "
        "(or the one all selected backends serve), `REPO=SHA,...` (a JSON object in cdk.json) pins each "
        "repository. A package pins its source repository's commit "
        "([Same weights everywhere](#same-weights-everywhere-the-pinned-commit))",
        shown="none (the newest at deploy time)"),
    Key("hf_token_secret", _secret_name, "Secrets Manager secret *name* holding the Hugging Face token",
        default="inference-kit/hf-token"),
    # A published tag (kit/dlc.py PUBLISHED_SAGEMAKER_TAGS: the DLC's docs data
    # docs/src/data/vllm/0.31.0-gpu-sagemaker.yml, commit 8c7b4b1d; Ubuntu 24.04 base since 0.28,
    # CUDA 13.0, hence the al2023 GPU 4-1 inference AMI below; tests/kit/test_dlc.py).
    Key("sagemaker_vllm_tag", _vllm_tag, "the AWS vLLM container's tag (`kit/dlc.py` lists the published ones)",
        default="0.31.0-gpu-py312-cu130-ubuntu24.04-sagemaker"),
    Key("sagemaker_ami_version", _ami_version, "the endpoint's `InferenceAmiVersion` (`''` omits it)",
        default="al2023-ami-sagemaker-inference-gpu-4-1"),  # CUDA 13 images (cfn-lint schema enum)
    Key("image_az", _az, "a preferred AZ for the image builds' subnet; the deploy checks it offers the build "
        "types", shown="the first AZ that offers the build types"),
    Key("neuron_parent_image", _parent_image, "an `ami-` id to build the Neuron image on instead",
        shown="the Neuron DLAMI's SSM parameter"),
    Key("neuron_sdk", _neuron_sdk,
        lambda rows: f"the Neuron SDK line the {_neuron_ids()} image is built on, each with its own image stack and SSM "
        "parameter (`kit/pins.py`): " + "; ".join(f"`{ln}`: {line.status}" for ln, line in pins.NEURON_LINES.items()),
        default=pins.NEURON_DEFAULT_LINE),
    Key("tags", _tags, "extra tags on every resource (JSON object in cdk.json; keys without spaces or `/`, since "
        "EC2 backends expose tags through IMDS)", default={}),
    Key("image_kms_key", _kms_key,
        "a KMS key ARN the image recipes encrypt the build volumes, and so the AMIs, under, instead; it must be in "
        "the region of every image stack (KMS keys are regional: one line refuses otherwise), and its policy must "
        "let Image Builder's service-linked role use it through EC2 (the account root statement does, with that "
        "role's own policy)", shown="none: each image stack's own key (`alias/inference-kit/<image>`)"),
    Key("idle_stop_minutes", _whole(0, 1440), "EC2 idle stop; 0 disables; at most 1440", default=60),
    Key("ttl_hours", lambda raw, at: _ttl_hours(raw),
        "hard limit for every billable resource, counted from the deploy; at least 1 (the deploy itself waits up "
        "to an hour for the backend's first answer: a shorter limit could stop it before `cdk deploy` returns); "
        "0 disables (not advised); at most 720", default=8),
    Key("max_model_len", _whole(256, 131072),
        lambda rows: f"`--max-model-len` / `SM_VLLM_MAX_MODEL_LEN`; on {_neuron_ids()} the tokens per sequence the "
        "Neuron engine compiles (its prompt buckets follow, `kit/fit.py` `neuron_compile`); 256 to 131072",
        default=4096),
    # ~9 min to InService in the seed; 20 of 21 endpoints in a public reproduction took <= 11.3 min.
    Key("sagemaker_ready_minutes", _whole(15, 55),
        "how long `cdk deploy` waits for the SageMaker endpoint to be InService before failing the stack (it is "
        "billed while Creating; `stacks/endpoint_ready.py`); 15 to 55", default=45),
)

def known_keys() -> frozenset[str]:
    """Every context key a row of the keys table accepts."""
    return frozenset(k for row in KEYS for k in row.keys())


KNOWN_KEYS: frozenset[str] = known_keys()
# The raw default of every single key that has one (a family's defaults are its catalog rows').
DEFAULTS: dict[str, Any] = {row.name: row.default for row in KEYS if row.has is None and row.default is not None}


# The kit's keys are snake_case; CDK's own context keys carry "@", ":" or "-" (feature flags,
# lookups, cli-telemetry), so a snake_case key the kit does not know is a typo: refusing it keeps
# `-c backend=g6` from silently synthesizing every backend, or `-c ttl_hour=1` the default TTL.
_KIT_SHAPED = re.compile(r"^[a-z][a-z0-9_]*$")
# InferenceAmiVersion names (SageMaker API enum, e.g. al2-ami-sagemaker-inference-gpu-3-1).
_AMI_VERSION = re.compile(r"^al2(023)?-ami-sagemaker-inference-(gpu|neuron)-[0-9]+(-[0-9]+)*$")


def check_keys(context: Mapping[str, Any]) -> None:
    """Refuse a snake_case key no row of the keys table names, with the nearest one it does."""
    known = known_keys()
    unknown = sorted(k for k in context if _KIT_SHAPED.match(k) and k not in known)
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"did you mean {near[0]!r}?" if near else f"valid: {', '.join(sorted(known))}"
        raise ConfigError(f"unknown context key {key!r}; {hint}")


def read_keys(context: Mapping[str, Any]) -> dict[str, Any]:
    """Every row of the keys table read, in order: key -> typed value."""
    got: dict[str, Any] = {}
    for row in KEYS:
        for key, backend in row.targets(got):
            raw = context[key] if key in context else row.default_for(backend)
            got[key] = row.read(raw, At(key, backend, context, got))
    return got


def parse(context: Mapping[str, Any]) -> KitConfig:
    """Validate the kit's context keys (CDK's own keys, which are not snake_case, pass through):
    the keys table read row by row, then the checks that span keys (a SageMaker region's vLLM
    container, the variants' deployments, the pinned commits, the subnet blocks)."""
    check_keys(context)
    got = read_keys(context)
    backends = [_deployment(bid, got, context) for bid in got["backends"]]
    variants = _variants(got, {b.id: b for b in backends})
    backends, variants = _pin_revisions(context, got, backends, variants)
    _check_subnet_blocks(backends, variants)
    plain = {f.name: got[f.name] for f in fields(KitConfig) if f.name in got and f.name != "backends"}
    return KitConfig(backends=tuple(backends), variants=variants, **plain)


def _deployment(bid: str, got: Mapping[str, Any], context: Mapping[str, Any]) -> BackendConfig:
    """A selected backend's settings; for SageMaker, refused where the region has no vLLM
    container (it comes from the region's DLC registry)."""
    b = BACKENDS[bid]
    region = got[f"{bid}_region"]
    if b.service == "sagemaker":
        try:
            dlc.dlc_account(region)
        except dlc.DlcRegionError as e:
            key = kit_regions.region_key(bid) if context.get(kit_regions.region_key(bid)) is not None else "region"
            raise ConfigError(f"{key}={region!r}: {e}") from None
    itypes = got.get(f"{bid}_instance_types", ())
    return BackendConfig(bid, itypes[0] if itypes else got.get(f"{bid}_instance_type"), got[f"{bid}_model"],
                         itypes, got.get(f"{bid}_az"), got.get(f"{bid}_image"), region, ami=got.get(f"{bid}_ami"))


def _check_subnet_blocks(backends: list[BackendConfig], variants: tuple[BackendConfig, ...]) -> None:
    """Every EC2 stack's subnet block is declared in its catalog row (kit/subnets.py): a row
    without one, or more variants than its row declares blocks for, is refused here."""
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


def _variants(got: Mapping[str, Any], selected: Mapping[str, BackendConfig]) -> tuple[BackendConfig, ...]:
    """The variants' deployments (their items read by ``_variant_items``), for the selected
    backends only, in catalog order: the backend's settings with the item's model (an item without
    one serves the backend's own) and instance type."""
    out: list[BackendConfig] = []
    for bid, base in ((b, selected[b]) for b in BACKEND_IDS if b in selected):
        for slot, item in enumerate(got.get(kit_variants.key(bid), ())):
            model = item.model or base.model_id
            if item.instance_type is None:
                out.append(replace(base, model_id=model, variant=item.name, slot=slot))
            else:
                out.append(replace(base, model_id=model, variant=item.name, slot=slot, instance_type=item.instance_type,
                                   instance_types=(item.instance_type,) if base.instance_types else ()))
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
    else:  # a string of pairs (the row's reader refused any other type)
        items = [(r.strip(), v.strip()) for r, _, v in (i.partition("=") for i in _str_list("model_revision", raw))]
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


def _pin_revisions(context: Mapping[str, Any], got: Mapping[str, Any], backends: list[BackendConfig],
                   variants: tuple[BackendConfig, ...]) -> tuple[list[BackendConfig], tuple[BackendConfig, ...]]:
    """Each deployment with the commit of its weights' repository (kit/weights.py weights_repo):
    ``<id>_model_revision`` for the backend and its variants of the same repository, else
    ``model_revision`` for that repository, else None (the newest at deploy time). Every
    ``<id>_model_revision`` was checked by its row, selected or not."""
    own = {bid: got[f"{bid}_model_revision"]
           for bid in BACKEND_IDS if BACKENDS[bid].open_weights and got[f"{bid}_model_revision"]}
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
