"""THE reusable EC2 inference construct: one model server on one instance, reachable only
through the VPC's EC2 Instance Connect Endpoint, answering before ``cdk deploy`` returns.

Used by every EC2 backend (g6, g5g, inf2, trn1; see stacks/ec2_backend.py). What it builds:
- the instance from an AMI id held in an SSM parameter (resolved by CloudFormation at deploy
  time), in a public subnet of its own, in an Availability Zone that offers its instance type in
  the deploying account (stacks/az_choice.py; ``-c <id>_az`` is a preference it checks), with a
  public IPv4 address for outbound downloads (no NAT);
- an encrypted gp3 root volume, IMDSv2 required (instance tags readable through IMDS for the
  TTL guard), detailed monitoring, ``InstanceInitiatedShutdownBehavior=stop`` so an OS shutdown
  (idle/TTL guard) stops rather than terminates;
- a security group with one ingress rule, tcp/22 from the Instance Connect Endpoint's group, and
  egress limited to tcp/80 and tcp/443 (package mirrors, PyPI, Hugging Face, AWS APIs);
- an instance role: AmazonSSMManagedInstanceCore, read of the one Hugging Face token secret,
  plus ``extra_statements``;
- user data assembled from userdata/: kit.env (variables, shell-quoted), lib.sh, the engine file,
  boot.sh, then ``kit-boot`` runs; see userdata/boot.sh for the provisioning steps;
- two readiness gates the stack (so ``cdk deploy``) waits on; the instance signals both after
  ``/health`` and one real chat completion succeeded, or signals failure:
  1. a ``CreationPolicy`` on the instance (SignalResource). CloudFormation invokes a creation
     policy whenever it creates the resource (CloudFormation User Guide, CreationPolicy
     attribute: "invoked only when CloudFormation creates the associated resource"), and a
     replacement is a creation. So every new instance is waited for, whatever replaced it: new
     user data, a new instance type, a new AZ, or a new AMI id behind the SSM parameter, which
     CloudFormation resolves again on every update (ImageId, SubnetId and AvailabilityZone are
     create-only properties of AWS::EC2::Instance in its registry schema). SignalResource has no
     reason field: the UniqueId (64 characters) carries the instance id and the end of the reason.
  2. a wait condition on a presigned handle URL in the user data, whose failure signal carries
     the log tail as its reason, shown in the stack events. A wait condition cannot be updated
     ("Updates aren't supported" for Count, Handle and Timeout, AWS::CloudFormation::WaitCondition
     reference), so it and its handle carry the user-data digest in their logical ids: a new
     digest creates a new pair. A replacement the digest cannot see (AMI value, AZ, both known
     only at deploy time) is gated by (1) alone; its failure reason is then the short one.
  The wait condition does not depend on the instance: both gates run while the instance boots,
  and the first failure fails the stack. It depends on everything the instance depends on (its
  subnet and AZ choice, role, instance profile, security group): a wait condition's timeout runs
  from its own creation ("creates a wait condition just like any other resource ... waits until it
  receives the requisite number of success signals or the wait condition's timeout period has
  expired", CloudFormation User Guide, "Create wait conditions in a CloudFormation template"), and
  without those dependencies that is the stack's start, minutes before the instance launches, so it
  could time out before the instance's own failure signal (the log tail) arrived.
  The handle's presigned URL expires a day after the stack created it (X-Amz-Expires=86399, not
  configurable: aws-cloudformation/cloudformation-coverage-roadmap#1842), so an instance that
  replaces the first one later finds it refused; kit_signal (userdata/lib.sh) then still sends
  SignalResource, and gate (1) alone decides.

Catalog facts read: none; it is backend-independent. stacks/ec2_backend.py passes what the
catalog decided (instance type, port, image family, the engine's settings as KIT_* variables).

The instance's logical id carries a digest of the user data, so a change to the scripts or the
variables replaces the instance (user data runs on first boot only) instead of silently doing
nothing.
"""
from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path
from typing import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from kit.contracts import boot_env
from stacks import nag
from stacks.az_choice import OfferedSubnet

USERDATA_DIR = Path(__file__).resolve().parent.parent / "userdata"
USER_DATA_LIMIT = 16 * 1024  # EC2 limit on raw user data
# What a token in the user data may grow to when CloudFormation resolves it: the wait-condition
# handle's presigned URL is ~470 bytes for a short stack name (X-Amz-Credential, X-Amz-Signature,
# the URL-encoded stack ARN; tests/stacks/test_user_data_size.py records one), several hundred more
# than the ~20-byte placeholder synthesis sees.
TOKEN_BUDGET = 1024
_HEREDOC_START = re.compile(r"(?<!<)<<(?!<)(-?)\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)")
_HEREDOC = "KIT_EOF"
_ENV_NAME = boot_env.NAME

# Where each file lands on the instance (boot.sh sources the others from these paths).
_LIB_PATH = "/usr/local/lib/inference-kit/lib.sh"
_ENGINE_PATH = "/usr/local/lib/inference-kit/engine.sh"
_BOOT_PATH = "/usr/local/bin/kit-boot"
_ENV_PATH = "/etc/inference-kit/kit.env"


def strip_comments(script: str) -> str:
    """``script`` without its comment-only lines (the shebang and here-document bodies kept as
    they are): the scripts carry ~7 KB of comments and EC2 takes 16 KB of user data."""
    out: list[str] = []
    end: str | None = None
    tabs = False
    for i, line in enumerate(script.splitlines()):
        if end is not None:
            out.append(line)
            if (line.lstrip("\t") if tabs else line) == end:  # bash's own rule for the delimiter
                end = None
            continue
        if i and line.lstrip().startswith("#"):
            continue
        out.append(line)
        m = _HEREDOC_START.search(line)
        if m:
            tabs, end = m.group(1) == "-", m.group(2)
    return "\n".join(out) + "\n"


def deployed_size(user_data: str, env: Mapping[str, str]) -> int:
    """Bytes of ``user_data`` once CloudFormation has resolved its tokens (TOKEN_BUDGET each)."""
    tokens = [str(v) for v in env.values() if cdk.Token.is_unresolved(v)]
    return len(user_data.encode()) + sum(TOKEN_BUDGET - len(shlex.quote(v).encode()) for v in tokens)


def render_user_data(engine_script: str, env: Mapping[str, str]) -> str:
    """The whole user data script: writes kit.env and the scripts, then runs kit-boot.

    ``env`` values may hold CDK tokens (resolved by CloudFormation); they are shell-quoted.
    """
    for k in env:
        if not _ENV_NAME.match(k):
            raise ValueError(f"user-data variable {k!r} must look like KIT_NAME")
    env_text = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in sorted(env.items()))
    files = [
        (_ENV_PATH, "0600", env_text),
        (_LIB_PATH, "0644", strip_comments((USERDATA_DIR / "lib.sh").read_text())),
        (_ENGINE_PATH, "0644", strip_comments((USERDATA_DIR / engine_script).read_text())),
        (_BOOT_PATH, "0755", strip_comments((USERDATA_DIR / "boot.sh").read_text())),
    ]
    out = ["#!/bin/bash", "# Written by stacks/inference_instance.py from userdata/*.sh", "set -euo pipefail",
           "umask 022", "install -d -m 0755 /etc/inference-kit /usr/local/lib/inference-kit"]
    for path, mode, text in files:
        if any(line.strip() == _HEREDOC for line in text.splitlines()):
            raise ValueError(f"{path}: a line equal to {_HEREDOC} would end the here-document early")
        out += [f"cat >{path} <<'{_HEREDOC}'", text.rstrip("\n"), _HEREDOC, f"chmod {mode} {path}"]
    out += [f"exec {_BOOT_PATH} provision", ""]
    return "\n".join(out)


class InferenceInstance(Construct):
    """One model server on one EC2 instance.

    Args:
        vpc, eice_security_group: from NetworkStack.
        instance_type: e.g. ``g6.xlarge``.
        image_parameter: SSM parameter name holding the AMI id (public DLAMI or an image pipeline's).
        image_id: the AMI id itself instead (a token from Custom::ImagesReady, stacks/image_guard.py,
            for the kit's own images and ``-c <id>_ami``); ``image_parameter`` then only names it.
        engine_script: file under userdata/ defining ``engine_install`` and ``engine_exec``.
        env: KIT_* variables for the engine (model, port, flags…); the construct adds
            KIT_REGION, KIT_STACK, KIT_SIGNAL_URL, KIT_HF_SECRET, KIT_PORT, KIT_READY_TIMEOUT_S;
            all of them declared in kit/contracts/boot_env.py for ``engine_script``.
        port: model server port, bound to 127.0.0.1 on the instance.
        hf_token_secret_name: Secrets Manager secret *name*; read at boot, never written to logs.
        root_volume_gib, root_device_name: root EBS volume.
        readiness_timeout: wait-condition timeout; sized for install + download + load.
        extra_statements: more IAM statements for the instance role (e.g. an image bucket).
        availability_zone: the AZ (name) to prefer; None = the first AZ offering the type.
        cidr_base: third octet of this instance's block of /24s (stacks/az_choice.py).

    Attributes: ``instance``, ``role``, ``security_group``, ``user_data_text``, ``logical_id``,
    ``image_parameter``, ``ready`` (the wait condition), ``ready_handle``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc,
                 eice_security_group: ec2.ISecurityGroup, instance_type: str, image_parameter: str,
                 engine_script: str, env: Mapping[str, str], port: int, hf_token_secret_name: str,
                 root_volume_gib: int, readiness_timeout: cdk.Duration,
                 root_device_name: str = "/dev/sda1",
                 extra_statements: Sequence[iam.PolicyStatement] = (),
                 availability_zone: str | None = None, cidr_base: int = 64,
                 image_id: str | None = None) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.image_parameter = image_parameter
        # Where its type is offered in this account (deploy time), not the region's first AZ.
        self.placement = OfferedSubnet(self, "Placement", vpc=vpc, instance_types=[instance_type],
                                       preferred_az=availability_zone, cidr_base=cidr_base)

        self.role = iam.Role(
            self, "Role", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"{stack.stack_name} inference instance",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )
        secret = secretsmanager.Secret.from_secret_name_v2(self, "HfTokenSecret", hf_token_secret_name)
        secret.grant_read(self.role)
        for s in extra_statements:
            self.role.add_to_policy(s)

        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"{stack.stack_name}: SSH from the Instance Connect Endpoint only",
        )
        self.security_group.add_ingress_rule(eice_security_group, ec2.Port.tcp(22),
                                             "SSH from the EC2 Instance Connect Endpoint only")
        for p, why in ((443, "HTTPS: PyPI, Hugging Face, AWS APIs"), (80, "HTTP: Ubuntu package mirrors")):
            self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(p), why)

        # The logical ids are fixed from a digest of everything but the handle URL (a token).
        base_env = {**env, "KIT_REGION": stack.region, "KIT_STACK": stack.stack_name,
                    "KIT_HF_SECRET": hf_token_secret_name, "KIT_PORT": str(port),
                    # The wait condition's clock starts when the instance's creation does (it waits
                    # for what the instance waits for), the script's after boot: give up 5 minutes
                    # early so the failure signal (with its reason) wins.
                    "KIT_READY_TIMEOUT_S": str(int(readiness_timeout.to_seconds()) - 300)}
        digest = hashlib.sha256(
            (render_user_data(engine_script, base_env) + image_parameter + instance_type
             + (image_id if image_id and not cdk.Token.is_unresolved(image_id) else "")).encode()
        ).hexdigest()[:8].upper()
        self.logical_id = f"{construct_id}Instance{digest}"
        self.ready_handle = cdk.CfnWaitConditionHandle(self, "ReadyHandle")
        self.ready_handle.override_logical_id(f"{construct_id}ReadyHandle{digest}")
        full_env = {**base_env, "KIT_SIGNAL_URL": self.ready_handle.ref, "KIT_SIGNAL_RESOURCE": self.logical_id}
        # exactly the variables kit/contracts/boot_env.py declares for this engine (a ValueError
        # naming one otherwise): what the scripts read is what the stack writes
        full_env = boot_env.check_env(full_env, engine_script)
        self.user_data_text = render_user_data(engine_script, full_env)
        size = deployed_size(self.user_data_text, full_env)
        if size > USER_DATA_LIMIT:
            raise ValueError(f"user data is {size} bytes once deployed (tokens resolved); EC2 allows {USER_DATA_LIMIT}")

        self.instance = ec2.Instance(
            self, "Instance",
            instance_type=ec2.InstanceType(instance_type),
            machine_image=(ec2.MachineImage.generic_linux({stack.region: image_id}) if image_id
                           else ec2.MachineImage.from_ssm_parameter(image_parameter)),
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=[self.placement.subnet]),
            security_group=self.security_group,
            role=self.role,
            user_data=ec2.UserData.custom(self.user_data_text),
            block_devices=[ec2.BlockDevice(
                device_name=root_device_name,
                volume=ec2.BlockDeviceVolume.ebs(root_volume_gib, encrypted=True, delete_on_termination=True,
                                                 volume_type=ec2.EbsDeviceVolumeType.GP3))],
            http_tokens=ec2.HttpTokens.REQUIRED,  # IMDSv2 only
            http_endpoint=True,
            http_put_response_hop_limit=1,
            instance_metadata_tags=True,  # the TTL guard reads its tag through IMDS
            detailed_monitoring=True,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.STOP,
            propagate_tags_to_volume_on_creation=True,
        )
        cfn = self.instance.node.default_child
        cfn.override_logical_id(self.logical_id)
        # A public IPv4 address on the primary interface. ec2.Instance only allows that for the
        # VPC's own public subnets (its SetAssociatePublicIpAddress check), not one made here.
        cfn.add_property_deletion_override("SubnetId")
        cfn.add_property_deletion_override("SecurityGroupIds")
        cfn.add_property_override("NetworkInterfaces", [{
            "DeviceIndex": "0", "AssociatePublicIpAddress": True, "SubnetId": self.placement.subnet.subnet_id,
            "GroupSet": [self.security_group.security_group_id]}])
        # Gate 1: every creation of this instance, replacements included, waits for its signal.
        cfn.cfn_options.creation_policy = cdk.CfnCreationPolicy(resource_signal=cdk.CfnResourceSignal(
            count=1, timeout=f"PT{int(readiness_timeout.to_minutes())}M"))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="SignalOwnCreationPolicy", actions=["cloudformation:SignalResource"],
            resources=[stack.format_arn(service="cloudformation", resource="stack",
                                        resource_name=f"{stack.stack_name}/*")]))
        partition = cdk.region_info.RegionInfo.get(stack.region).partition or "aws"
        nag.acknowledge(self.role, f"AwsSolutions-IAM5[Resource::arn:{partition}:cloudformation:{stack.region}:"
                                   f"<AWS::AccountId>:stack/{stack.stack_name}/*]",
                        "SignalResource on this stack only; the stack id after the name is not known "
                        "before the stack exists")
        # Gate 2: the wait condition, whose failure carries the whole reason (see the module doc).
        self.ready = cdk.CfnWaitCondition(self, "Ready", handle=self.ready_handle.ref, count=1,
                                          timeout=str(int(readiness_timeout.to_seconds())))
        self.ready.override_logical_id(f"{construct_id}Ready{digest}")
        # Its clock starts with the instance's creation, not with the stack (module docstring).
        profile = next(c for c in self.instance.node.children if isinstance(c, iam.CfnInstanceProfile))
        for prerequisite in (self.placement, self.role, profile, self.security_group):
            self.ready.node.add_dependency(prerequisite)

        nag.acknowledge(self.role, nag.SSM_CORE,
                        "AmazonSSMManagedInstanceCore is the AWS-maintained minimum for Session Manager and "
                        "SSM inventory on an instance; a hand copy would drift from the agent's needs")
        nag.acknowledge(self.instance, "AwsSolutions-EC29",
                        "Termination protection would block `cdk destroy`; the kit must tear down in one "
                        "command. An instance per backend, not an ASG: one model server, stopped when idle")
