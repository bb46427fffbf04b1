"""The stack outputs every backend stack emits: the harness needs nothing else to find a backend.

One row per key: its meaning, the services whose stacks emit it, and when (always, only on a
variant stack, only on a stack serving a package). stacks/outputs.py emits exactly
``keys_for(...)`` and refuses anything else; harness/discovery.py reads an endpoint's fields from
the keys that carry ``endpoint_field``. tests/stacks/test_synth.py and test_variants.py check
that every synthesized backend stack's template has exactly these keys.

Values that do not apply are never invented: Bedrock's InstanceType is "managed", a disabled
TTL is "disabled", a disabled idle stop is 0.
"""
from __future__ import annotations

from dataclasses import dataclass

SERVICES = ("ec2", "sagemaker", "bedrock")  # the catalog's word for what bills (kit/catalog.py)
ALWAYS, VARIANT, PACKAGE = "always", "variant", "package"


@dataclass(frozen=True)
class OutputKey:
    name: str
    meaning: str
    services: tuple[str, ...] = SERVICES  # whose stacks emit it
    when: str = ALWAYS  # ALWAYS, VARIANT (a variant stack, kit/variants.py) or PACKAGE (serves a package)
    # The harness.endpoint.Endpoint field discovery fills from it, and whether a stack without it
    # is refused (a required key missing is one DiscoveryError line naming it).
    endpoint_field: str | None = None
    required: bool = False


OUTPUT_KEYS: tuple[OutputKey, ...] = (
    OutputKey("BackendId", "the catalog backend id (kit/catalog.py): g6, inf2, sagemaker ..."),
    OutputKey("Service", "what bills for it: ec2, sagemaker or bedrock"),
    OutputKey("Region", "the stack's region"),
    OutputKey("ModelId", "the model served (a Hugging Face id, a Bedrock id, or package:<scheme>)"),
    OutputKey("InstanceType", "e.g. g6.xlarge; SageMaker: its first type; Bedrock: managed"),
    OutputKey("TtlExpiresAt", "the hard time limit as UTC ISO time, or disabled"),
    OutputKey("IdleStopMinutes", "minutes without traffic before the guard stops it; 0: never"),
    OutputKey("InstanceId", "the EC2 instance", ("ec2",), endpoint_field="instance_id", required=True),
    OutputKey("Port", "the model server's port on the instance's loopback", ("ec2",),
              endpoint_field="port", required=True),
    OutputKey("SshUser", "the OS user for EC2 Instance Connect", ("ec2",), endpoint_field="ssh_user"),
    OutputKey("EndpointName", "the SageMaker endpoint of the first instance type", ("sagemaker",),
              endpoint_field="endpoint_name", required=True),
    OutputKey("EndpointNames", "every instance type's endpoint, type=name,...", ("sagemaker",)),
    OutputKey("ModelRevision", "the commit the stack pins for its weights (kit/weights.py), or unpinned",
              ("ec2", "sagemaker"), endpoint_field="model_revision"),
    OutputKey("ModelArn", "the inference profile or foundation model invoked", ("bedrock",)),
    OutputKey("InvokePolicyArn", "a managed policy that may invoke only that model", ("bedrock",)),
    OutputKey("InvokeRoleArn", "a role carrying that policy", ("bedrock",)),
    OutputKey("Variant", "the variant's name (kit/variants.py)", ("ec2", "sagemaker"), VARIANT),
    OutputKey("Scheme", "the weight scheme its model id names; unknown when it names none",
              ("ec2", "sagemaker"), VARIANT),
    OutputKey("PackageUri", "the newest package build when deployed", ("ec2",), PACKAGE),
)
BY_NAME = {k.name: k for k in OUTPUT_KEYS}

COMMON_KEYS = tuple(k.name for k in OUTPUT_KEYS if k.when == ALWAYS and k.services == SERVICES)
VARIANT_KEYS = tuple(k.name for k in OUTPUT_KEYS if k.when == VARIANT)
KIND_KEYS = {s: tuple(k.name for k in OUTPUT_KEYS if k.when == ALWAYS and k.services != SERVICES and s in k.services)
             for s in SERVICES}


def keys_for(service: str, *, variant: bool = False, package: bool = False) -> tuple[str, ...]:
    """The keys a backend stack of ``service`` emits, in declaration order."""
    if service not in SERVICES:
        raise ValueError(f"service {service!r} is not one of {', '.join(SERVICES)}")
    on = {ALWAYS, *([VARIANT] if variant else []), *([PACKAGE] if package else [])}
    return tuple(k.name for k in OUTPUT_KEYS if service in k.services and k.when in on)


def endpoint_fields(service: str) -> dict[str, OutputKey]:
    """Endpoint field -> the output key discovery reads it from, for a stack of ``service``."""
    return {k.endpoint_field: k for k in OUTPUT_KEYS
            if k.endpoint_field and service in k.services and k.when == ALWAYS}
