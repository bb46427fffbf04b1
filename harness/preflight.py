"""Preflight before spending: ``python -m harness.preflight [--backends g6,inf2] [--region R]``.

Checks, per selected backend, everything that would make ``cdk deploy`` fail or hang:
credentials (``sts get_caller_identity``); the instance type offered in the region, and in which
AZs (``describe_instance_type_offerings``); the on-demand vCPU quota of its family against what
all selected stacks need together (G and VT ``L-DB2E81BA``, Inf ``L-1945791B``, Trn
``L-2C3B7624``; vCPUs from ``harness.catalog.INSTANCES``); the SageMaker endpoint-usage quota for
ml.* types; Bedrock model access (``get_foundation_model_availability``); the CDK bootstrap
(SSM ``/cdk-bootstrap/hnb659fds/version`` or the ``CDKToolkit`` stack).

One table, one verdict per backend; exit 1 when something blocks a deploy, 2 on bad input.
Running instances also count against a vCPU quota: the table shows the quota, not the free room.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from harness import catalog
from harness.endpoints import resolve_region

QUOTA_CODES = {"G": "L-DB2E81BA", "Inf": "L-1945791B", "Trn": "L-2C3B7624"}
QUOTA_NAMES = {"G": "Running On-Demand G and VT instances", "Inf": "Running On-Demand Inf instances",
               "Trn": "Running On-Demand Trn instances"}
BOOTSTRAP_PARAM = "/cdk-bootstrap/hnb659fds/version"
_GEO_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.", "global.")


def quota_class(instance_type: str) -> str | None:
    """Which on-demand vCPU quota an EC2 type draws from (None: not one the kit tracks)."""
    t = instance_type.split(".", 1)[0]
    if t.startswith("inf"):
        return "Inf"
    if t.startswith("trn"):
        return "Trn"
    if t.startswith(("g", "vt")):
        return "G"
    return None


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
    """Quota '<ml type> for endpoint usage', looked up by name (SageMaker codes are per type)."""
    cache: dict[str, float] | None = None

    def find(instance_type: str) -> float | None:
        nonlocal cache
        if cache is None:
            cache = {}
            try:
                for page in client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
                    for q in page.get("Quotas", []):
                        cache[q.get("QuotaName", "")] = float(q.get("Value", 0))
            except Exception:  # noqa: BLE001
                return None
        return cache.get(f"{instance_type} for endpoint usage")
    return find


def run_preflight(session: Any, region: str, backends: list[str], *, quota: QuotaFn | None = None,
                  sagemaker_quota: Callable[[str], float | None] | None = None,
                  bedrock: Any = None) -> Report:
    """All checks for ``backends`` in ``region``; ``session`` is a boto3 Session. Clients the
    tests cannot get from moto (service-quotas for EC2 codes, bedrock) are injectable."""
    rep = Report(region)
    selected = [catalog.backend(b) for b in backends]
    try:
        ident = session.client("sts", region_name=region).get_caller_identity()
        rep.add("*", "credentials", "ok", f"{ident['Arn']} (account {ident['Account']})")
    except Exception as exc:  # noqa: BLE001
        rep.add("*", "credentials", "BLOCK", f"no usable AWS credentials: {_short(exc)}")
        return rep
    rep.add("*", "region", "ok", region)
    _check_bootstrap(session, region, rep)

    ec2 = session.client("ec2", region_name=region)
    if quota is None:
        quota = service_quota_getter(session.client("service-quotas", region_name=region))
    need: dict[str, int] = {}
    for b in selected:
        if b.is_ec2 and b.instance_type:
            cls = quota_class(b.instance_type)
            spec = catalog.INSTANCES.get(b.instance_type)
            if cls and spec:
                need[cls] = need.get(cls, 0) + spec.vcpus
    for b in selected:
        if b.service == "bedrock":
            _check_bedrock(session, region, b, rep, bedrock)
        elif b.service == "sagemaker":
            _check_sagemaker(session, region, b, rep, sagemaker_quota)
        else:
            _check_ec2(ec2, b, rep, quota, need)
    return rep


def _short(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _check_bootstrap(session: Any, region: str, rep: Report) -> None:
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
        rep.add("*", "cdk bootstrap", "BLOCK", f"not bootstrapped: run npx cdk bootstrap aws://ACCOUNT/{region}")


def _check_ec2(ec2: Any, b: catalog.Backend, rep: Report, quota: QuotaFn, need: dict[str, int]) -> None:
    t = b.instance_type or ""
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [t]}])
        azs = sorted({o["Location"] for p in pages for o in p.get("InstanceTypeOfferings", [])})
    except Exception as exc:  # noqa: BLE001
        rep.add(b.id, f"{t} offered", "warn", f"could not check: {_short(exc)}")
        azs = None
    if azs is not None:
        if azs:
            rep.add(b.id, f"{t} offered", "ok", ", ".join(azs))
        else:
            rep.add(b.id, f"{t} offered", "BLOCK", f"{t} is not offered in {rep.region}; pick another region")
    cls = quota_class(t)
    spec = catalog.INSTANCES.get(t)
    if not cls or not spec:
        rep.add(b.id, "vCPU quota", "warn", f"{t}: no quota class or vCPU count known to the kit")
        return
    value = quota("ec2", QUOTA_CODES[cls])
    label = f"vCPU quota {QUOTA_CODES[cls]}"
    if value is None:
        rep.add(b.id, label, "warn", f"could not read '{QUOTA_NAMES[cls]}'")
    elif value < need[cls]:
        rep.add(b.id, label, "BLOCK", f"{QUOTA_NAMES[cls]} = {value:g} vCPUs, selected stacks need "
                f"{need[cls]} ({t}: {spec.vcpus}); request an increase in Service Quotas")
    else:
        rep.add(b.id, label, "ok", f"{value:g} vCPUs >= {need[cls]} needed")


def _check_sagemaker(session: Any, region: str, b: catalog.Backend, rep: Report,
                     finder: Callable[[str], float | None] | None) -> None:
    t = b.instance_type or ""
    if finder is None:
        finder = sagemaker_quota_finder(session.client("service-quotas", region_name=region))
    value = finder(t)
    label = "endpoint quota"
    if value is None:
        rep.add(b.id, label, "warn", f"could not read '{t} for endpoint usage'")
    elif value < 1:
        rep.add(b.id, label, "BLOCK", f"'{t} for endpoint usage' = {value:g}; request an increase")
    else:
        rep.add(b.id, label, "ok", f"{t} for endpoint usage = {value:g}")


def base_model_id(model_id: str) -> str:
    """``us.amazon.nova-micro-v1:0`` (inference profile) -> ``amazon.nova-micro-v1:0``."""
    for p in _GEO_PREFIXES:
        if model_id.startswith(p):
            return model_id[len(p):]
    return model_id


def _check_bedrock(session: Any, region: str, b: catalog.Backend, rep: Report, client: Any) -> None:
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
        bad.append("no entitlement (enable model access in the Bedrock console)")
    agreement = (a.get("agreementAvailability") or {}).get("status")
    if agreement not in (None, "AVAILABLE", "NOT_AVAILABLE"):
        bad.append(f"agreement {agreement}")
    if bad:
        rep.add(b.id, "model access", "BLOCK", f"{mid}: " + "; ".join(bad))
    else:
        rep.add(b.id, "model access", "ok", f"{mid} available and authorized")


def parse_backends(value: str | None) -> list[str]:
    if not value:
        return list(catalog.BACKEND_IDS)
    ids = [v.strip() for v in value.split(",") if v.strip()]
    for i in ids:
        if i not in catalog.BACKENDS:
            raise ValueError(f"--backends: unknown backend {i!r}; valid: {', '.join(catalog.BACKEND_IDS)}")
    return ids


def main(argv: list[str] | None = None, *, session: Any = None, **inject: Any) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", help=f"comma-separated, default all: {','.join(catalog.BACKEND_IDS)}")
    p.add_argument("--region")
    args = p.parse_args(argv)
    try:
        backends = parse_backends(args.backends)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    region = resolve_region(args.region)
    if not region:
        print("no region: pass --region, set AWS_REGION, or set context.region in cdk.json", file=sys.stderr)
        return 2
    if session is None:
        import boto3

        session = boto3.Session(region_name=region)
    rep = run_preflight(session, region, backends, **inject)
    print(f"preflight in {region} for {', '.join(backends)}\n")
    print(rep.render(backends))
    return 1 if rep.blocked(backends) else 0


if __name__ == "__main__":
    sys.exit(main())
