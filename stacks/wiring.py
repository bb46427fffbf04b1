"""Wire the kit: NetworkStack, one stack per selected backend, cdk-nag, tags.

Stacks carry ``env=Environment(region=...)`` and no account: synthesis makes no lookups and
needs no credentials. A backend stack that uses the VPC depends on NetworkStack through its
cross-stack references (VPC subnet, Instance Connect Endpoint group), so ``cdk deploy G6Stack`` deploys NetworkStack first.

Catalog facts read (kit/catalog.py): per selected backend its ``service`` (which stack class
builds it), ``stack_name`` and ``label``; stacks/images.py reads the image families.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import aws_cdk as cdk

from kit import variants
from kit.catalog import BACKENDS
from stacks import nag
from kit.config import KitConfig, package_revisions
from stacks.ec2_backend import Ec2BackendStack
from stacks.guardrails import ttl_expiry
from stacks.images import ImagePipelineStack, image_specs
from stacks.network import NetworkStack
from stacks.package import PackageStack, check_backend

KIT_TAGS = {"project": "aws-inference-kit"}


def _suffix(config: KitConfig, region: str) -> str:
    """Stack-name suffix of a region's shared stacks: none in the kit's region (the names users
    know), ``-<region>`` in a region a backend was moved to with ``<id>_region``."""
    return "" if region == config.region else f"-{region}"


def build(app: cdk.App, config: KitConfig, now: datetime | None = None) -> dict[str, cdk.Stack]:
    """Create the stacks on ``app``; returns them by stack name. ``now`` fixes the TTL clock (tests).

    Every region the configuration uses (kit/regions.py) gets its own NetworkStack, image
    pipelines and package builder for the backends placed there: AMIs, SSM parameters and VPCs
    are regional, and no stack refers to another region."""
    now = now or datetime.now(timezone.utc)
    expires = ttl_expiry(now, config.ttl_hours)
    checked_at = now.isoformat(timespec="seconds")  # Custom::ImagesReady runs again on every deploy
    stacks: dict[str, cdk.Stack] = {}
    networks: dict[str, NetworkStack] = {}

    def get_network(region: str) -> NetworkStack:
        if region not in networks:
            name = "NetworkStack" + _suffix(config, region)
            networks[region] = NetworkStack(
                app, name, azs=config.azs if region == config.region else (),
                env=cdk.Environment(region=region),
                description="Inference kit: VPC without NAT, Instance Connect Endpoint, S3 endpoint")
            stacks[name] = networks[region]
        return networks[region]

    for bc in config.deployments:  # the selected backends, then their variants (kit/variants.py)
        spec = BACKENDS[bc.id]
        name = variants.stack_name(bc.id, bc.variant)
        desc = f"Inference kit: {spec.label}" + (f", variant {bc.variant} ({bc.model_id} on {bc.instance_type})"
                                                 if bc.variant else "")
        env = cdk.Environment(region=bc.region)
        if spec.service == "ec2":
            net = get_network(bc.region)
            stack = Ec2BackendStack(app, name, backend=bc, config=config, vpc=net.vpc,
                                    eice_security_group=net.eice_security_group, ttl_expires_at=expires,
                                    checked_at=checked_at, env=env, description=desc)
        elif spec.service == "sagemaker":
            from stacks.sagemaker import SageMakerStack

            stack = SageMakerStack(app, name, backend=bc, config=config, ttl_expires_at=expires,
                                   checked_at=checked_at, env=env, description=desc)
        else:
            from stacks.bedrock import BedrockStack

            stack = BedrockStack(app, name, backend=bc, config=config, env=env, description=desc)
        stacks[name] = stack

    for region in config.regions:
        here = tuple(bc for bc in config.backends if bc.region == region)
        if not here:
            continue
        local = replace(config, region=region, backends=here,
                        image_az=config.image_az if region == config.region else None)
        env = cdk.Environment(region=region)
        # The package builder (stacks/package.py), when a backend here serves a package.
        if any(check_backend(bc.id, bc.model_id) for bc in here + tuple(v for v in config.variants
                                                                           if v.region == region)):
            name = "PackageStack" + _suffix(config, region)
            stacks[name] = PackageStack(
                app, name, hf_token_secret=config.hf_token_secret, env=env,
                pinned_revisions=package_revisions(config, region),
                description="Inference kit: quantized model packages (S3 bucket, CPU CodeBuild build)")
        # Image pipelines for the EC2 backends' images here (stacks/images.py). Deploying one
        # builds nothing: a pipeline has no schedule and runs only when started (docs/images.md).
        for spec in image_specs(local).values():
            name = spec.stack_name + _suffix(config, region)
            stacks[name] = ImagePipelineStack(app, name, spec=spec, config=local,
                                              vpc=get_network(region).vpc, env=env, description=spec.description)

    for key, value in {**KIT_TAGS, **config.tags}.items():
        cdk.Tags.of(app).add(key, value)
    nag.enable(app)
    return stacks
