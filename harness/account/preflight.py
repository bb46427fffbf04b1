"""Preflight before spending: ``python -m harness preflight [--backends g6,inf2] [--region R] [-c K=V]``.

What is checked is what ``cdk deploy`` would create: cdk.json context (plus ``-c`` overrides)
parsed by ``kit.config`` (instance-type overrides, the SageMaker type sweep, configured AZs).
Checks, per selected backend, everything that would make ``cdk deploy`` fail or hang:
credentials (``sts get_caller_identity``); the instance type offered in the region, and in which
AZs (``describe_instance_type_offerings``); the on-demand vCPU quota of its family against what
all selected stacks need together (G and VT ``L-DB2E81BA``, Inf ``L-1945791B``, Trn
``L-2C3B7624``; vCPUs from ``kit.catalog.INSTANCES``); the SageMaker endpoint-usage quota for
ml.* types; Bedrock model access (``get_foundation_model_availability``); the CDK bootstrap
(SSM ``/cdk-bootstrap/hnb659fds/version`` or the ``CDKToolkit`` stack). What a fresh account trips
on besides (harness/account/preflight_fresh.py): the AMI parameter each EC2 backend boots, and for a kit
image not built yet its parent parameter, build-host offerings and vCPU quotas (the On-Demand
Standard quota ``L-1216C47A`` for the sm_75 build's c7g.8xlarge); the SageMaker container image
tag in the region's DLC registry; the Hugging Face token secret (exists, shaped like a token,
never printed) for every backend but Bedrock; for backends that serve a package, the CodeBuild
concurrent-build quota of the package build's environment (kit/codebuild.py). A backend's variants
(kit/variants.py) count as the stacks they are, each on its own instance type: one quota line per
class with every stack's vCPUs summed, each SageMaker type's quota against its endpoints, and each
stack's on-demand price (informational; the dated snapshot unless a price book is given); the
commit of the weights each stack will serve (pinned, baked into its image, or the newest at deploy
time), with a warning when the Neuron (or vllm-cuda) image holds another commit than the pinned
one (harness/account/preflight_weights.py). A backend whose image holds its weights at the commit it
serves is not asked for the Hugging Face token (one line says why: the AMI's tags when this account
owns it, else what the kit builds into that image for this configuration). A backend that boots
an AMI another account owns (a workshop attendee's shared image) gets one line with what its
deploy bills per hour, that the image bills its owner, and the share command its owner runs when a
launch is refused; an AMI this account cannot see names the command its owner (the workshop
organizer) runs for this account. Every BLOCK line ends with its fix (``fix: <command>``).

One table, one verdict per backend; exit 1 when something blocks a deploy, 2 on bad input.
Running instances also count against a vCPU quota: the table shows the quota, not the free room.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kit import catalog, variants
from harness.account import preflight_fresh as fresh
from kit.cli import OneLineParser, one_line_errors
from kit.errors import KitError, UsageError
from kit.regions import resolve

QUOTA_CODES = {cls: code for cls, (code, _) in fresh.EC2_QUOTAS.items()}
QUOTA_NAMES = {cls: name for cls, (_, name) in fresh.EC2_QUOTAS.items()}
BOOTSTRAP_PARAM = "/cdk-bootstrap/hnb659fds/version"
_GEO_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.", "global.")


quota_class = fresh.quota_class


@dataclass(frozen=True)
class Target:
    """One backend as ``cdk deploy`` would create it (from cdk.json context, else the catalog)."""

    id: str
    service: str
    instance_types: tuple[str, ...] = ()
    model_id: str = ""
    az: str | None = None  # EC2: the AZ it launches in, when the config names one
    image_choice: str | None = None  # EC2: the boot-image choice (catalog Backend.image_choices)
    container_tag: str | None = None  # SageMaker: the vLLM DLC tag (sagemaker_vllm_tag)
    parent_image: str | None = None  # neuron image builds: neuron_parent_image, if set
    image_az: str | None = None  # image builds in this backend's region: -c image_az, if set
    # Every stack of the backend: its own, then its variants' (kit/variants.py), each as (endpoint
    # name, instance types); a variant may run another type (g6@g5 on g5.xlarge). Empty: the
    # backend's own stack on ``instance_types`` only.
    deployments: tuple[tuple[str, tuple[str, ...]], ...] = ()
    hf_token_secret: str | None = None  # the Secrets Manager secret its stacks read (hf_token_secret)
    serves_package: bool = False  # it or a variant serves a package: PackageStack's build must start
    neuron_sdk: str | None = None  # neuron backends: the SDK line whose image they boot (-c neuron_sdk)
    ami: str | None = None  # EC2: the AMI id it boots instead of its image parameter (-c <id>_ami)
    # (deployment, weights' repository, pinned commit or None) of each stack (kit/weights.py)
    weights: tuple[tuple[str, str, str | None], ...] = ()

    @property
    def stacks(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return self.deployments or ((self.id, self.instance_types),)

    @property
    def copies(self) -> int:
        """Stacks of this backend: its own plus its variants, each an instance or endpoint."""
        return len(self.stacks)

    def all_types(self) -> list[str]:
        """Every instance type its stacks run, once each, in order."""
        return list(dict.fromkeys(t for _, types in self.stacks for t in types))

    def count(self, instance_type: str) -> int:
        """How many instances (EC2) or endpoints (SageMaker) of ``instance_type`` its stacks make."""
        return sum(types.count(instance_type) for _, types in self.stacks)


def targets_from_catalog(backends: list[str]) -> list[Target]:
    from kit.config import DEFAULTS

    out = []
    for bid in backends:
        b = catalog.backend(bid)
        out.append(Target(bid, b.service, (b.instance_type,) if b.instance_type else (), b.model_id,
                          image_choice=b.image_choices[0][0] if b.image_choices else None,
                          container_tag=DEFAULTS["sagemaker_vllm_tag"] if b.service == "sagemaker" else None,
                          hf_token_secret=DEFAULTS["hf_token_secret"] if b.service != "bedrock" else None,
                          weights=((bid, b.model_id, None),) if b.open_weights else ()))
    return out


def _serves_package(model_id: str) -> bool:
    from kit.schemes import scheme_of_model

    try:
        return scheme_of_model(model_id) is not None
    except ValueError:  # an unknown scheme: the deploy refuses it (stacks/package.py)
        return True


def targets_from_config(context: dict[str, Any], backends: list[str] | None) -> tuple[str, list[Target]]:
    """Region and targets from cdk.json context, parsed by the same code the CDK app uses
    (``kit.config``: plain Python, no aws-cdk-lib), so preflight checks what would deploy."""
    from kit.config import parse

    ctx = dict(context)
    if backends:
        ctx["backends"] = ",".join(backends)
    cfg = parse(ctx)
    out = []

    def types_of(d) -> tuple[str, ...]:
        return d.instance_types or ((d.instance_type,) if d.instance_type else ())

    for bc in cfg.backends:
        b = catalog.backend(bc.id)
        types = types_of(bc)
        launch_az = bc.az  # a preference; without one the deploy picks an AZ that offers the type
        out.append(Target(bc.id, b.service, types, bc.model_id, launch_az, bc.image_choice,
                          cfg.sagemaker_vllm_tag if b.service == "sagemaker" else None,
                          cfg.neuron_parent_image if b.image == "neuron" else None,
                          # as stacks/wiring.py: image_az applies to the builds in the main region only
                          image_az=cfg.image_az if (bc.region or cfg.region) == cfg.region else None,
                          deployments=tuple((variants.endpoint_name(d.id, d.variant), types_of(d))
                                            for d in (bc, *(v for v in cfg.variants if v.id == bc.id))),
                          neuron_sdk=cfg.neuron_sdk if b.image == "neuron" else None,
                          hf_token_secret=cfg.hf_token_secret if b.service != "bedrock" else None,
                          serves_package=any(_serves_package(d.model_id) for d in (bc, *cfg.variants) if d.id == bc.id),
                          ami=bc.ami, weights=_weights(bc, cfg.variants) if b.open_weights else ()))
    return cfg.region, out


def _weights(bc: Any, all_variants: tuple) -> tuple[tuple[str, str, str | None], ...]:
    """(deployment, the weights' repository, its pinned commit) of a backend's stacks."""
    from kit.weights import weights_repo

    def repo(model_id: str) -> str:
        try:
            return weights_repo(model_id)
        except ValueError:  # an unknown scheme: the deploy refuses it (stacks/package.py)
            return model_id

    return tuple((variants.endpoint_name(d.id, d.variant), repo(d.model_id), d.model_revision)
                 for d in (bc, *(v for v in all_variants if v.id == bc.id)))


@dataclass
class Check:
    backend: str  # backend id, or "*" for account-wide checks
    check: str
    status: str  # ok | warn | BLOCK
    detail: str


@dataclass
class Report:
    region: str
    checks: list[Check] = field(default_factory=list)

    def add(self, backend: str, check: str, status: str, detail: str) -> None:
        self.checks.append(Check(backend, check, status, detail))

    def verdict(self, backend: str) -> str:
        mine = [c for c in self.checks if c.backend in (backend, "*")]
        if any(c.status == "BLOCK" for c in mine):
            return "blocked"
        return "ready (with warnings)" if any(c.status == "warn" for c in mine) else "ready"

    def blocked(self, backends: Iterable[str]) -> bool:
        return any(self.verdict(b) == "blocked" for b in backends)

    def render(self, backends: Iterable[str]) -> str:
        rows = [("backend", "check", "status", "detail")]
        rows += [(c.backend, c.check, c.status, c.detail) for c in self.checks]
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}" for r in rows]
        lines.insert(1, "-" * (sum(w) + 6 + 20))
        lines.append("")
        lines += [f"{b:<10} {self.verdict(b)}" for b in backends]
        return "\n".join(lines)


QuotaFn = Callable[[str, str], float | None]  # (service_code, quota_code) -> value


def service_quota_getter(client: Any) -> QuotaFn:
    """Applied quota value, else the AWS default; None when the quota cannot be read."""
    def get(service: str, code: str) -> float | None:
        try:
            return float(client.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
        except Exception:  # noqa: BLE001 - fall back to the default, then give up
            try:
                return float(client.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
            except Exception:  # noqa: BLE001
                return None
    return get


def sagemaker_quota_finder(client: Any) -> Callable[[str], float | None]:
    """Quota '<ml type> for endpoint usage', looked up by name (SageMaker codes are per type);
    the codes ListServiceQuotas returned are kept in ``find.codes`` (type -> QuotaCode) for the fix."""
    cache: dict[str, float] | None = None
    codes: dict[str, str] = {}

    def find(instance_type: str) -> float | None:
        nonlocal cache
        if cache is None:
            cache = {}
            try:
                for page in client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
                    for q in page.get("Quotas", []):
                        cache[q.get("QuotaName", "")] = float(q.get("Value", 0))
                        if q.get("QuotaName", "").endswith(" for endpoint usage") and q.get("QuotaCode"):
                            codes[q["QuotaName"].removesuffix(" for endpoint usage")] = q["QuotaCode"]
            except Exception:  # noqa: BLE001
                return None
        return cache.get(f"{instance_type} for endpoint usage")
    find.codes = codes  # type: ignore[attr-defined]
    return find


def run_preflight(session: Any, region: str, targets: list[Target], *, quota: QuotaFn | None = None,
                  sagemaker_quota: Callable[[str], float | None] | None = None,
                  bedrock: Any = None, ssm: Any = None, ecr: Any = None, secrets: Any = None,
                  prices: Any = None) -> Report:
    """All checks for ``targets`` in ``region``; ``session`` is a boto3 Session. Clients the
    tests cannot get from moto (service-quotas for EC2 and CodeBuild codes, bedrock, SSM's public
    /aws/service parameters, another account's ECR registry) are injectable, and so is the
    Secrets Manager client, and the price book (default: the dated snapshot, harness/cost/prices.py)."""
    rep = Report(region)
    try:
        ident = session.client("sts", region_name=region).get_caller_identity()
        rep.add("*", "credentials", "ok", f"{ident['Arn']} (account {ident['Account']})")
    except Exception as exc:  # noqa: BLE001
        rep.add("*", "credentials", "BLOCK", f"no usable AWS credentials: {_short(exc)}")
        return rep
    rep.add("*", "region", "ok", region)
    _check_bootstrap(session, region, rep, ident.get("Account", "ACCOUNT"))

    ec2 = session.client("ec2", region_name=region)
    if quota is None:
        quota = service_quota_getter(session.client("service-quotas", region_name=region))
    # One vCPU quota per class (G and VT, Inf, Trn): what every stack's instance needs, summed,
    # whatever family or size each runs (a g6 stack and its g5/g6e/g7e twins share L-DB2E81BA).
    need: dict[str, int] = {}
    for t in targets:
        if t.service == "ec2":
            for _, types in t.stacks:
                for it in types:
                    cls, spec = quota_class(it), catalog.INSTANCES.get(it)
                    if cls and spec:
                        need[cls] = need.get(cls, 0) + spec.vcpus
    for t in targets:
        if t.service == "bedrock":
            _check_bedrock(session, region, t, rep, bedrock)
        elif t.service == "sagemaker":
            for it in t.all_types():
                _check_sagemaker(session, region, t.id, it, rep, sagemaker_quota, t.count(it))
        else:
            classes: set[str] = set()  # one quota line per class per backend, whatever its types
            for it in t.all_types():
                _check_ec2(ec2, t, it, rep, quota, need, classes)
    from harness.account.preflight_weights import ImageLookup, baked_weights

    account_id = ident.get("Account", "")
    images = ImageLookup(ec2, _short)  # one DescribeImages per AMI for every line below
    hourly = _check_prices(rep, region, targets, prices)
    _check_account(session, region, targets, rep, quota, ec2, ssm, ecr, images, account_id)
    boots = _boot_amis(session, region, targets, ssm)
    _check_weights(region, targets, rep, ec2, boots, images)
    _check_shared_images(rep, region, targets, boots, images, account_id, hourly)
    # A backend whose image holds its weights downloads nothing: its token is not needed.
    baked = baked_weights(region, targets, boots, images, account_id)
    for bid, why in baked.items():
        rep.add(bid, "HF token secret", "ok", why)
    for name in dict.fromkeys(t.hf_token_secret for t in targets if t.hf_token_secret and t.id not in baked):
        fresh.check_token_secret(rep.add, region, secrets or session.client("secretsmanager", region_name=region),
                                   name, [t.id for t in targets if t.hf_token_secret == name and t.id not in baked],
                                   _short)
    packaged = [t.id for t in targets if t.serves_package]
    if packaged:
        fresh.check_package_build_quota(rep.add, region, quota, packaged)
    return rep


def _check_account(session: Any, region: str, targets: list[Target], rep: Report, quota: QuotaFn,
                   ec2: Any, ssm: Any, ecr: Any, images: Any = None, account_id: str | None = None) -> None:
    """Boot images (and the builds of kit images not built yet) and the SageMaker container image."""
    from kit.image_facts import FAMILY_IMAGE, IMAGE_PARAMETERS
    from kit.image_families import boot_family

    boot: dict[str, str] = {}
    wanted: dict[str, list[str]] = {}
    parent = image_az = None
    for t in targets:
        family = catalog.backend(t.id).image
        if t.service != "ec2" or not family:
            continue
        if t.ami:  # -c <id>_ami: this AMI boots, not the image parameter; nothing to build
            fresh.check_given_ami(rep.add, region, ec2, t.id, t.ami, _short, account_id, images)
            continue
        boot[t.id] = boot_family(family, t.image_choice, t.neuron_sdk).ssm_parameter
        image = FAMILY_IMAGE.get(family)
        if family == "neuron":
            from kit.image_facts import neuron_image

            image = neuron_image(t.neuron_sdk)
        if image and IMAGE_PARAMETERS[image] == boot[t.id]:
            wanted.setdefault(image, []).append(t.id)
        parent = parent or t.parent_image
        image_az = image_az or t.image_az
    if boot:
        fresh.check_images(rep.add, region, ssm or session.client("ssm", region_name=region), ec2, quota,
                             wanted, boot, parent, _short, image_az=image_az)
    for t in targets:
        if t.service == "sagemaker" and t.container_tag:
            fresh.check_container_image(rep.add, region, ecr or session.client("ecr", region_name=region),
                                          t.id, t.container_tag, _short)


def _boot_amis(session: Any, region: str, targets: list[Target], ssm: Any) -> dict[str, str | None]:
    """Backend id -> the AMI an EC2 backend boots when it is a kit image (its image parameter's
    value; None when that does not resolve) or ``-c <id>_ami``; public DLAMIs are left out."""
    from kit.image_facts import IMAGE_PARAMETERS
    from kit.image_families import boot_family

    params: dict[str, str] = {}
    boots: dict[str, str | None] = {}
    for t in targets:
        family = catalog.backend(t.id).image
        if t.service != "ec2" or not family:
            continue
        if t.ami:
            boots[t.id] = t.ami
            continue
        name = boot_family(family, t.image_choice, t.neuron_sdk).ssm_parameter
        if name in IMAGE_PARAMETERS.values():  # a kit image: it may carry weights
            params[t.id] = name
    if params:
        try:
            values = fresh.resolve_parameters(ssm or session.client("ssm", region_name=region), params.values())
        except Exception:  # noqa: BLE001 - the AMI parameter line already says why
            values = {}
        boots.update({bid: values.get(name) for bid, name in params.items()})
    return boots


def _check_weights(region: str, targets: list[Target], rep: Report, ec2: Any, boots: dict[str, str | None],
                   images: Any) -> None:
    """The commit each deployment will serve, and a kit image's baked commit against the pin
    (harness/account/preflight_weights.py)."""
    from harness.account.preflight_weights import check_weights

    with_weights = {t.id for t in targets if t.weights}
    check_weights(rep.add, region, targets, {b: a for b, a in boots.items() if b in with_weights}, ec2, _short, images)


def _check_shared_images(rep: Report, region: str, targets: list[Target], boots: dict[str, str | None], images: Any,
                         account_id: str, hourly: dict[str, list[tuple[str, float | None]]]) -> None:
    """For a backend that boots an AMI another account owns: what its deploy bills per hour, that
    the image bills its owner, and who to ask when a launch is refused (preflight_fresh.py)."""
    from kit.image_families import boot_family

    for t in targets:
        ami = boots.get(t.id)
        if not ami:
            continue
        family = boot_family(catalog.backend(t.id).image or "", t.image_choice, t.neuron_sdk)
        fresh.check_shared_image(rep.add, region, t.id, ami, images.get(ami), account_id,
                                   hourly.get(t.id, []), family.root_volume_gib)


def _short(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _check_bootstrap(session: Any, region: str, rep: Report, account_id: str = "ACCOUNT") -> None:
    try:
        v = session.client("ssm", region_name=region).get_parameter(Name=BOOTSTRAP_PARAM)["Parameter"]["Value"]
        rep.add("*", "cdk bootstrap", "ok", f"{BOOTSTRAP_PARAM} = {v}")
        return
    except Exception:  # noqa: BLE001 - fall through to the stack check
        pass
    try:
        st = session.client("cloudformation", region_name=region).describe_stacks(StackName="CDKToolkit")["Stacks"][0]
        rep.add("*", "cdk bootstrap", "ok", f"CDKToolkit {st.get('StackStatus')}")
    except Exception:  # noqa: BLE001
        rep.add("*", "cdk bootstrap", "BLOCK", f"{region} not bootstrapped for the CDK; fix: npx cdk bootstrap "
                f"aws://{account_id}/{region}")


def _check_ec2(ec2: Any, target: Target, t: str, rep: Report, quota: QuotaFn, need: dict[str, int],
               reported: set[str] | None = None) -> None:
    bid = target.id
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [t]}])
        azs = sorted({o["Location"] for p in pages for o in p.get("InstanceTypeOfferings", [])})
    except Exception as exc:  # noqa: BLE001
        rep.add(bid, f"{t} offered", "warn", f"could not check: {_short(exc)}")
        azs = None
    if azs is not None:
        if not azs:
            rep.add(bid, f"{t} offered", "BLOCK", f"{t} is not offered in {rep.region}; pick another region")
        else:
            # The AZ the deploy will pick: the same decision Custom::AzChoice makes (stacks/az_choice.py).
            from kit.az_choice import ChoiceError, choose

            try:
                chosen, _ = choose(rep.region, azs, {t: set(azs)}, target.az or "")
                rep.add(bid, f"{t} offered", "ok", f"{', '.join(azs)}; the deploy will use {chosen}")
            except ChoiceError as e:
                rep.add(bid, f"{t} offered", "BLOCK", str(e).replace("<id>", bid))
    cls = quota_class(t)
    spec = catalog.INSTANCES.get(t)
    if not cls or not spec:
        rep.add(bid, "vCPU quota", "warn", f"{t}: no quota class or vCPU count known to the kit")
        return
    if reported is not None:
        if cls in reported:
            return
        reported.add(cls)
    value = quota("ec2", QUOTA_CODES[cls])
    label = f"vCPU quota {QUOTA_CODES[cls]}"
    mine = ", ".join(f"{it}: {catalog.INSTANCES[it].vcpus}" + (f" x {target.count(it)}" if target.count(it) > 1 else "")
                     for it in target.all_types() if quota_class(it) == cls and it in catalog.INSTANCES)
    if value is None:
        rep.add(bid, label, "warn", f"could not read '{QUOTA_NAMES[cls]}'")
    elif value < need[cls]:
        rep.add(bid, label, "BLOCK", f"{QUOTA_NAMES[cls]} = {value:g} vCPUs, selected stacks need "
                f"{need[cls]} ({mine}); fix: "
                f"{fresh.quota_fix('ec2', QUOTA_CODES[cls], need[cls], rep.region)}")
    else:
        rep.add(bid, label, "ok", f"{value:g} vCPUs >= {need[cls]} needed")


def _check_sagemaker(session: Any, region: str, bid: str, t: str, rep: Report,
                     finder: Callable[[str], float | None] | None, need: int = 1) -> None:
    """The endpoint-usage quota of ``t`` against the ``need`` endpoints of that type the selected
    stacks make (the backend's sweep and its variants; one instance each)."""
    if finder is None:
        finder = sagemaker_quota_finder(session.client("service-quotas", region_name=region))
    value = finder(t)
    label = f"{t} endpoint quota"
    if value is None:
        rep.add(bid, label, "warn", f"could not read '{t} for endpoint usage'")
    elif value < need:
        code = getattr(finder, "codes", {}).get(t)
        rep.add(bid, label, "BLOCK", f"'{t} for endpoint usage' = {value:g}"
                + (f", selected stacks need {need}" if need > 1 else "") + "; fix: "
                f"{fresh.sagemaker_fix(t, code, region, need)}")
    else:
        rep.add(bid, label, "ok", f"{t} for endpoint usage = {value:g}" + (f" >= {need} needed" if need > 1 else ""))


def _check_prices(rep: Report, region: str, targets: list[Target], prices: Any) -> dict[str, list[tuple[str, float | None]]]:
    """What each stack bills per hour while it runs, on its own instance type (a variant twin on
    g5.xlarge at g5.xlarge's price): informational, never a BLOCK; a type the price book lacks says so.
    Returns backend id -> (instance type, $/h or None) of each instance or endpoint its stacks run."""
    if prices is None:
        from harness.cost.prices import PriceBook

        prices = PriceBook.auto(offline=True)
    hourly: dict[str, list[tuple[str, float | None]]] = {}
    for t in targets:
        if t.service == "bedrock":
            continue
        for name, types in t.stacks:
            for it in types:
                q = prices.instance(it, region)
                hourly.setdefault(t.id, []).append((it, q.usd_per_hour))
                label = f"{name} price" if len(types) == 1 else f"{name} {it} price"
                if q.usd_per_hour is None:
                    rep.add(t.id, label, "ok", f"{it}: no on-demand price in the {q.label} prices "
                            "(harness.cost prices a run live when credentials allow)")
                else:
                    where = "" if q.region == region else f"; {q.region}'s price, not {region}'s"
                    rep.add(t.id, label, "ok", f"{it} ${q.usd_per_hour:g}/h on demand ({q.label}{where})")
    return hourly


def base_model_id(model_id: str) -> str:
    """``us.amazon.nova-micro-v1:0`` (inference profile) -> ``amazon.nova-micro-v1:0``."""
    for p in _GEO_PREFIXES:
        if model_id.startswith(p):
            return model_id[len(p):]
    return model_id


def _check_bedrock(session: Any, region: str, b: Target, rep: Report, client: Any) -> None:
    client = client or session.client("bedrock", region_name=region)
    mid = base_model_id(b.model_id)
    try:
        a = client.get_foundation_model_availability(modelId=mid)
    except Exception as exc:  # noqa: BLE001
        rep.add(b.id, "model access", "BLOCK", f"{mid}: {_short(exc)}")
        return
    bad = []
    if a.get("regionAvailability") != "AVAILABLE":
        bad.append(f"not available in {region}")
    if a.get("authorizationStatus") != "AUTHORIZED":
        bad.append("not authorized (IAM or SCP denies it)")
    if a.get("entitlementAvailability") != "AVAILABLE":
        bad.append("no entitlement")
    agreement = (a.get("agreementAvailability") or {}).get("status")
    if agreement not in (None, "AVAILABLE", "NOT_AVAILABLE"):
        bad.append(f"agreement {agreement}")
    if bad:
        fix = ("deploy Bedrock where it is (-c bedrock_region=<region>)" if len(bad) == 1 and bad[0].startswith("not available")
               else f"enable access to {mid} in the Bedrock console, Model access, in {region} "
                    f"(https://{region}.console.aws.amazon.com/bedrock/home?region={region}#/modelaccess)")
        rep.add(b.id, "model access", "BLOCK", f"{mid}: " + "; ".join(bad) + f"; fix: {fix}")
    else:
        rep.add(b.id, "model access", "ok", f"{mid} available and authorized")


def parse_backends(value: str | None) -> list[str] | None:
    if not value:
        return None
    ids = [v.strip() for v in value.split(",") if v.strip()]
    for i in ids:
        if i not in catalog.BACKENDS:
            raise UsageError(f"--backends: unknown backend {i!r}; valid: {', '.join(catalog.BACKEND_IDS)}")
    return ids


def _context(path: Path | None, overrides: list[str]) -> dict[str, Any] | None:
    """cdk.json context (``--cdk-json``, else ./cdk.json) plus ``-c KEY=VALUE`` overrides (as the
    CDK CLI takes them); None when ./cdk.json does not exist and there is no override. A named
    file that is missing, or any that is broken, is one line naming it (kit/regions.py)."""
    from kit.regions import read_context

    ctx: dict[str, Any] | None = None
    if path is not None or os.path.lexists("cdk.json"):  # JsonFileError: one line naming the file, exit 2
        ctx = read_context(path or Path("cdk.json"), required=path is not None)
    for o in overrides:
        k, sep, v = o.partition("=")
        if not sep or not k:
            raise UsageError(f"-c {o!r}: expected KEY=VALUE")
        ctx = ctx if ctx is not None else {}
        ctx[k] = v
    return ctx


@one_line_errors("preflight")
def main(argv: list[str] | None = None, *, session: Any = None, **inject: Any) -> int:
    p = OneLineParser(prog="python -m harness preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", help=f"comma-separated (default: cdk.json context backends): {','.join(catalog.BACKEND_IDS)}")
    p.add_argument("--region", help="the kit's region (default: cdk.json context region; the shell's "
                                    "AWS_REGION is not used, see kit/regions.py)")
    p.add_argument("--cdk-json", type=Path, default=None, help="default ./cdk.json")
    p.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE",
                   help="context override, as for cdk deploy -c (e.g. g5g_instance_type=g5g.4xlarge)")
    args = p.parse_args(argv)
    try:  # bad input is one line and exit 2 at the door (KitErrors: RegionError, ConfigError ...)
        backends = parse_backends(args.backends)
        ctx = _context(args.cdk_json, args.context)
        kit = resolve(args.region, context=ctx if ctx is not None else {})  # as the stacks deploy (kit/regions.py)
        region = kit.region
        if ctx is not None:
            if region:
                ctx["region"] = region
            region, targets = targets_from_config(ctx, backends)
        else:
            targets = targets_from_catalog(backends or list(catalog.BACKEND_IDS))
    except KitError:
        raise
    except ValueError as e:  # a value the kit's plain parsers refuse (kit/catalog.py, kit/models.py)
        raise UsageError(str(e)) from None
    if session is None:
        import boto3

        session = boto3.Session(region_name=region)
    ids = [t.id for t in targets]
    print(f"preflight in {kit.describe()} for {', '.join(ids)}")
    shell = kit.shell_note(os.environ)
    if shell:
        print(f"note: {shell}")
    blocked = False
    for where in kit.regions:  # each backend is checked in the region it deploys to
        group = [t for t in targets if kit.of(t.id) == where]
        if not group:
            continue
        rep = run_preflight(session, where, group, **inject)
        print(f"\n{where}" if len(kit.regions) > 1 else "")
        print(rep.render([t.id for t in group]))
        blocked = blocked or rep.blocked([t.id for t in group])
    return 1 if blocked else 0


if __name__ == "__main__":
    sys.exit(main())
