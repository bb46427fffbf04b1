"""Emit the stack outputs of one backend stack: exactly the keys kit/contracts/outputs.py
declares for its service (and for a variant stack, and a stack serving a package), which is also
what harness/discovery.py reads. docs/stacks.md documents them.

Catalog facts read: none directly; the caller passes the backend's id and ``service`` (the
catalog's word for what bills), which picks the service-specific keys.
Values that do not apply are never invented: Bedrock's InstanceType is "managed", a disabled
TTL is "disabled", a disabled idle stop is 0.
"""
from __future__ import annotations

from datetime import datetime

import aws_cdk as cdk

from kit import variants
from kit.contracts.outputs import BY_NAME, KIND_KEYS, keys_for
from stacks.guardrails import iso


def add_outputs(stack: cdk.Stack, *, backend_id: str, service: str, model_id: str, instance_type: str,
                ttl_expires_at: datetime | None, idle_stop_minutes: int, variant: str | None = None,
                package_uri: str | None = None, **kind: str) -> None:
    """``kind``: the service's own keys (KIND_KEYS); ``package_uri``: a stack serving a package
    (a token resolving the newest build's URI at deploy time)."""
    if set(kind) != set(KIND_KEYS[service]):
        raise ValueError(f"{service} outputs need exactly {sorted(KIND_KEYS[service])}, got {sorted(kind)}")
    values = {
        "BackendId": backend_id, "Service": service, "Region": stack.region, "ModelId": model_id,
        "InstanceType": instance_type,
        "TtlExpiresAt": iso(ttl_expires_at) if ttl_expires_at else "disabled",
        "IdleStopMinutes": str(idle_stop_minutes),
        **kind,
    }
    if variant is not None:
        values["Variant"] = variant
        values["Scheme"] = variants.scheme_of(model_id) or variants.UNKNOWN_SCHEME
    if package_uri is not None:
        values["PackageUri"] = package_uri
    keys = keys_for(service, variant=variant is not None, package=package_uri is not None)
    if set(values) != set(keys):  # a key added here and not declared in the contract, or the reverse
        raise ValueError(f"{service} outputs {sorted(values)} differ from the contract's {sorted(keys)}")
    for key in keys:
        # only PackageUri carries a description (a value resolved at deploy time, not the instance's)
        cdk.CfnOutput(stack, key, value=str(values[key]),
                      description=BY_NAME[key].meaning if key == "PackageUri" else None)
