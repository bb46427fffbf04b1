"""One stack class for every EC2 backend (g6, g5g, inf2, trn1): the catalog says which image
family, engine and port; the config says which instance type and model."""
from __future__ import annotations

from datetime import datetime

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from harness.catalog import BACKENDS
from stacks.config import BackendConfig, KitConfig
from stacks.guardrails import Ec2Guardrails
from stacks.image_families import ImageFamily, image_family
from stacks.inference_instance import InferenceInstance
from stacks.outputs import add_outputs
from stacks.vllm import tool_flags



class Ec2BackendStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, backend: BackendConfig, config: KitConfig,
                 vpc: ec2.IVpc, eice_security_group: ec2.ISecurityGroup, ttl_expires_at: datetime | None,
                 family: ImageFamily | None = None, extra_statements: tuple[iam.PolicyStatement, ...] = (),
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        spec = BACKENDS[backend.id]
        assert spec.service == "ec2" and spec.image and spec.port, spec
        family = family or image_family(spec.image)
        self.family = family
        env = {
            "KIT_BACKEND": backend.id,
            "KIT_MODEL": backend.model_id,
            "KIT_SERVED_MODEL": backend.model_id,
            "KIT_MAX_MODEL_LEN": str(config.max_model_len),
            **family.env,
        }
        if spec.engine.startswith("vLLM"):
            # Gemma 4: --enable-auto-tool-choice --tool-call-parser gemma4 (the seed's g6 run).
            env["KIT_VLLM_ARGS"] = tool_flags(backend.model_id)
        if family.name == "neuron":
            from stacks.images import neuron_tp_degree  # NeuronCores from the catalog

            env["KIT_TP_DEGREE"] = str(neuron_tp_degree(backend.instance_type, f"{backend.id}_instance_type"))
            # The runtime's degrees differ per family (trn1n runs trn1's).
            env["KIT_NEURON_PLATFORM"] = backend.instance_type.split(".")[0].rstrip("n")
        self.server = InferenceInstance(
            self, "Server", vpc=vpc, eice_security_group=eice_security_group,
            instance_type=backend.instance_type, image_parameter=family.ssm_parameter,
            engine_script=family.engine_script, env=env, port=spec.port,
            hf_token_secret_name=config.hf_token_secret, root_volume_gib=family.root_volume_gib,
            root_device_name=family.root_device_name,
            readiness_timeout=cdk.Duration.minutes(family.readiness_timeout_minutes),
            extra_statements=extra_statements, availability_zone=backend.az,
        )
        self.guardrails = Ec2Guardrails(self, "Guardrails", instance=self.server.instance,
                                        idle_stop_minutes=config.idle_stop_minutes, ttl_expires_at=ttl_expires_at,
                                        provisioning_minutes=family.readiness_timeout_minutes)
        add_outputs(self, backend_id=backend.id, service="ec2", model_id=backend.model_id,
                    instance_type=backend.instance_type, ttl_expires_at=ttl_expires_at,
                    idle_stop_minutes=config.idle_stop_minutes,
                    InstanceId=self.server.instance.instance_id, Port=str(spec.port), SshUser=family.ssh_user)
