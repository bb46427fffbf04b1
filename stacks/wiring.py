"""Wire the kit: NetworkStack, one stack per selected backend, cdk-nag, tags.

Stacks carry ``env=Environment(region=...)`` and no account: synthesis makes no lookups and
needs no credentials. A backend stack that uses the VPC depends on NetworkStack through its
cross-stack references (VPC subnet, Instance Connect Endpoint group), so ``cdk deploy G6Stack`` deploys NetworkStack first.

Catalog facts read (harness/catalog.py): per selected backend its ``service`` (which stack class
builds it), ``stack_name`` and ``label``; stacks/images.py reads the image families.
"""
from __future__ import annotations

from datetime import datetime, timezone

import aws_cdk as cdk

from harness.catalog import BACKENDS
from stacks import nag
from stacks.config import KitConfig
from stacks.ec2_backend import Ec2BackendStack
from stacks.guardrails import ttl_expiry
from stacks.images import ImagePipelineStack, image_specs
from stacks.network import NetworkStack
from stacks.package import PackageStack, check_backend

KIT_TAGS = {"project": "aws-inference-kit"}


def build(app: cdk.App, config: KitConfig, now: datetime | None = None) -> dict[str, cdk.Stack]:
    """Create the stacks on ``app``; returns them by stack name. ``now`` fixes the TTL clock (tests)."""
    env = cdk.Environment(region=config.region)
    expires = ttl_expiry(now or datetime.now(timezone.utc), config.ttl_hours)
    stacks: dict[str, cdk.Stack] = {}
    network = None

    def get_network() -> NetworkStack:
        nonlocal network
        if network is None:
            network = NetworkStack(app, "NetworkStack", azs=config.azs, env=env,
                                   description="Inference kit: VPC without NAT, Instance Connect Endpoint, S3 endpoint")
            stacks["NetworkStack"] = network
        return network

    for bc in config.backends:
        spec = BACKENDS[bc.id]
        desc = f"Inference kit: {spec.label}"
        if spec.service == "ec2":
            net = get_network()
            stack = Ec2BackendStack(app, spec.stack_name, backend=bc, config=config, vpc=net.vpc,
                                    eice_security_group=net.eice_security_group, ttl_expires_at=expires,
                                    env=env, description=desc)
        elif spec.service == "sagemaker":
            from stacks.sagemaker import SageMakerStack

            stack = SageMakerStack(app, spec.stack_name, backend=bc, config=config, ttl_expires_at=expires,
                                   env=env, description=desc)
        else:
            from stacks.bedrock import BedrockStack

            stack = BedrockStack(app, spec.stack_name, backend=bc, config=config, env=env, description=desc)
        stacks[spec.stack_name] = stack

    # The package builder (stacks/package.py), when a selected backend serves a package.
    if any(check_backend(bc.id, bc.model_id) for bc in config.backends):
        stacks["PackageStack"] = PackageStack(
            app, "PackageStack", hf_token_secret=config.hf_token_secret, env=env,
            description="Inference kit: quantized model packages (S3 bucket, CPU CodeBuild build)")

    # Image pipelines for the selected EC2 backends' images (stacks/images.py). Deploying one
    # builds nothing: a pipeline has no schedule and runs only when started (docs/images.md).
    for spec in image_specs(config).values():
        stacks[spec.stack_name] = ImagePipelineStack(app, spec.stack_name, spec=spec, config=config,
                                                     vpc=get_network().vpc, env=env, description=spec.description)

    for key, value in {**KIT_TAGS, **config.tags}.items():
        cdk.Tags.of(app).add(key, value)
    nag.enable(app)
    return stacks
