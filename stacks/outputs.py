"""The stack outputs every backend stack emits: the harness needs nothing else to find a backend.

Keys (identical on every backend stack; docs/stacks.md documents them):
  always            BackendId, Service, Region, ModelId, InstanceType, TtlExpiresAt, IdleStopMinutes
  service=ec2       InstanceId, Port, SshUser
  service=sagemaker EndpointName (first instance type), EndpointNames (type=name,...)
  service=bedrock   ModelArn (inference profile or foundation model), InvokePolicyArn, InvokeRoleArn
  a variant stack   Variant (its name, kit/variants.py), Scheme (the model's weight scheme,
                    "unknown" when the model id does not name it)
Catalog facts read: none directly; the caller passes the backend's id and ``service`` (the
catalog's word for what bills), which picks the service-specific keys above.
Values that do not apply are never invented: Bedrock's InstanceType is "managed", a disabled
TTL is "disabled", a disabled idle stop is 0.
"""
from __future__ import annotations

from datetime import datetime

import aws_cdk as cdk

from kit import variants
from stacks.guardrails import iso

COMMON_KEYS = ("BackendId", "Service", "Region", "ModelId", "InstanceType", "TtlExpiresAt", "IdleStopMinutes")
VARIANT_KEYS = ("Variant", "Scheme")
KIND_KEYS = {
    "ec2": ("InstanceId", "Port", "SshUser"),
    "sagemaker": ("EndpointName", "EndpointNames"),
    "bedrock": ("ModelArn", "InvokePolicyArn", "InvokeRoleArn"),
}


def add_outputs(stack: cdk.Stack, *, backend_id: str, service: str, model_id: str, instance_type: str,
                ttl_expires_at: datetime | None, idle_stop_minutes: int, variant: str | None = None,
                **kind: str) -> None:
    want = set(KIND_KEYS[service])
    if set(kind) != want:
        raise ValueError(f"{service} outputs need exactly {sorted(want)}, got {sorted(kind)}")
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
    for key, value in values.items():
        cdk.CfnOutput(stack, key, value=str(value))
