"""One stack class for every EC2 backend: the catalog says which image family, engine and port,
the config says which instance type, model and boot-image choice.

Catalog facts read (kit/catalog.py): ``Backend.image`` (the image family, hence the AMI and
the userdata/engine-*.sh script, kit/image_families.py), ``Backend.port`` and
``Backend.engine_settings`` for the instance type and model: vLLM's tool-call flags
(KIT_VLLM_ARGS), the Neuron platform (KIT_NEURON_PLATFORM) and the tensor-parallel degrees the
runtime supports on the instance (KIT_TP_DEGREES). The boot scripts receive these values as they
are and do not re-derive them.
"""
from __future__ import annotations

from datetime import datetime

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from kit.catalog import BACKENDS
from kit import subnets
from kit.config import BackendConfig, KitConfig
from stacks.guardrails import Ec2Guardrails
from kit.image_families import boot_family
from kit.image_needs import boot_need
from kit.fit import NeuronCompile
from kit.weights import UNPINNED
from stacks.image_guard import ImagesReady
from stacks.inference_instance import InferenceInstance
from stacks.outputs import add_outputs
from stacks import package
from stacks.sizing import sizing


def neuron_boot_env(nc: NeuronCompile) -> dict[str, str]:
    """The KIT_* variables carrying a Neuron compile to userdata/engine-neuron.sh, which passes
    them to the engine as ``nc.engine_args()`` lists them (stacks/images.py ``neuron_precompile``
    gives the image build the same values)."""
    return {"KIT_TP_DEGREES": ",".join(map(str, nc.tp_degrees)), "KIT_NEURON_PLATFORM": nc.platform,
            "KIT_MAX_MODEL_LEN": str(nc.total_tokens),
            "KIT_NEURON_TP_DEGREE": str(nc.tp_degree), "KIT_NEURON_BATCH_SIZE": str(nc.batch_size),
            "KIT_NEURON_PROMPT_BUCKETS": ",".join(map(str, nc.prompt_buckets))}


class Ec2BackendStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, backend: BackendConfig, config: KitConfig,
                 vpc: ec2.IVpc, eice_security_group: ec2.ISecurityGroup, ttl_expires_at: datetime | None,
                 extra_statements: tuple[iam.PolicyStatement, ...] = (), checked_at: str = "",
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        spec = BACKENDS[backend.id]
        assert spec.service == "ec2" and spec.image and spec.port, spec
        family = boot_family(spec.image, backend.image_choice, config.neuron_sdk)
        self.family = family
        # A package (stacks/package.py): synced from S3 at boot, served under "package:<scheme>".
        scheme = package.check_backend(backend.id, backend.model_id)
        model_id = f"{package.MODEL_WORD}:{scheme}" if scheme else backend.model_id
        env = {
            "KIT_BACKEND": backend.id,
            "KIT_MODEL": model_id,
            "KIT_SERVED_MODEL": model_id,
            "KIT_MAX_MODEL_LEN": str(config.max_model_len),
            **family.env,
        }
        if backend.model_revision:  # the commit every download on the instance takes (kit/weights.py)
            env["KIT_MODEL_REVISION"] = backend.model_revision
        if scheme:
            # The parameter's name, not its value: the instance reads the newest build's URI each time
            # its server starts (stacks/package.py says why not the value in the user data).
            env["KIT_MODEL_PARAM"] = package.parameter_name(scheme)
            extra_statements = (*extra_statements, *package.read_statements(scheme),
                                package.parameter_statement(scheme))
        source_model = package.source_model(scheme) if scheme else model_id
        # What this model needs here (kit/fit.py), or a one-line refusal naming a type that fits.
        size = sizing(backend.id, backend.instance_type, source_model, config.max_model_len,
                      backend.instance_key("ec2"), lambda best: backend.instance_fix("ec2", best))
        engine = spec.engine_settings(backend.instance_type, source_model)
        if engine.vllm_args is not None:
            env["KIT_VLLM_ARGS"] = engine.vllm_args
        if size.tp and size.tp > 1 and spec.engine_kind == "vllm":
            env["KIT_TENSOR_PARALLEL"] = str(size.tp)  # vllm serve --tensor-parallel-size
        if engine.tp_degrees:
            env["KIT_TP_DEGREES"] = ",".join(map(str, engine.tp_degrees))
            env["KIT_NEURON_PLATFORM"] = engine.neuron_platform
        if size.neuron:  # the compiled shapes, the planner's (kit/fit.py neuron_compile), as the image has them
            env.update(neuron_boot_env(size.neuron))
        # Each stack owns a block of /24s in the shared VPC, declared in its catalog row: the
        # backend's, or its variant slot's (kit/subnets.py; kit.config refused a missing one).
        cidr_base = subnets.backend_block(backend.id, None if backend.variant is None else backend.slot)
        ready_minutes = family.readiness_timeout_minutes + size.extra_ready_minutes
        # Before anything billable: every configured image exists (stacks/image_guard.py); the kit's
        # own image or -c <id>_ami comes from that check, a public DLAMI from its SSM parameter.
        self.images_ready = ImagesReady(self, "ImagesReady", config=config, own=boot_need(backend, config),
                                        checked_at=checked_at)
        self.server = InferenceInstance(
            self, "Server", vpc=vpc, eice_security_group=eice_security_group,
            instance_type=backend.instance_type, image_parameter=family.ssm_parameter,
            engine_script=family.engine_script, env=env, port=spec.port,
            hf_token_secret_name=config.hf_token_secret,
            root_volume_gib=family.root_volume_gib + size.extra_volume_gib,
            root_device_name=family.root_device_name,
            readiness_timeout=cdk.Duration.minutes(ready_minutes),
            extra_statements=extra_statements, availability_zone=backend.az,
            cidr_base=cidr_base, image_id=self.images_ready.boot_ami,
        )
        if self.images_ready.boot_ami is None:  # else its ImageId (GetAtt) already waits for the check
            self.server.instance.node.add_dependency(self.images_ready.resource)
        # The wait condition's clock starts when the instance's creation can (stacks/inference_instance.py).
        self.server.ready.node.add_dependency(self.images_ready.resource)
        self.guardrails = Ec2Guardrails(self, "Guardrails", instance=self.server.instance,
                                        idle_stop_minutes=config.idle_stop_minutes, ttl_expires_at=ttl_expires_at,
                                        provisioning_minutes=ready_minutes)
        package_uri = None
        if scheme:
            package.acknowledge_read(self.server.role, scheme)
            # Resolved at deploy time (no build yet: "parameter not found"), never part of the instance.
            package_uri = ssm.StringParameter.value_for_string_parameter(self, package.parameter_name(scheme))
        add_outputs(self, backend_id=backend.id, service="ec2", model_id=model_id,
                    instance_type=backend.instance_type, ttl_expires_at=ttl_expires_at,
                    idle_stop_minutes=config.idle_stop_minutes, variant=backend.variant, package_uri=package_uri,
                    InstanceId=self.server.instance.instance_id, Port=str(spec.port), SshUser=family.ssh_user,
                    ModelRevision=backend.model_revision or UNPINNED)
