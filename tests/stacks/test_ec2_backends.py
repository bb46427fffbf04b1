"""The four EC2 backends, all built by the one InferenceInstance construct."""
from __future__ import annotations

import re
import subprocess

import pytest

from harness.catalog import BACKENDS
from stacks.guardrails import IDLE_TAG, TTL_TAG
from stacks.image_families import IMAGE_FAMILIES
from stacks.inference_instance import USER_DATA_LIMIT, render_user_data
from tests.conftest import require_binary
from tests.stacks.conftest import EC2_STACKS, ROOT, synth

STACKS = sorted(EC2_STACKS.items())


def user_data(instance: dict) -> str:
    """The user data text with CloudFormation references shown as <Ref>."""
    ud = instance["Properties"]["UserData"]["Fn::Base64"]
    if isinstance(ud, str):
        return ud
    return "".join(p if isinstance(p, str) else "<Ref>" for p in ud["Fn::Join"][1])


def kit_env(text: str) -> dict[str, str]:
    block = text.split("cat >/etc/inference-kit/kit.env <<'KIT_EOF'\n", 1)[1].split("\nKIT_EOF", 1)[0]
    return dict(line.split("=", 1) for line in block.splitlines())


@pytest.mark.parametrize("backend,stack", STACKS)
def test_instance_type_image_and_hardening(kit, backend, stack):
    logical_id, instance = kit.one(stack, "AWS::EC2::Instance")
    p = instance["Properties"]
    assert p["InstanceType"] == BACKENDS[backend].instance_type
    # AMI id from an SSM parameter, resolved by CloudFormation at deploy time.
    param = kit.templates[stack]["Parameters"][p["ImageId"]["Ref"]]
    assert param["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert param["Default"] == kit.stacks[stack].server.image_parameter
    assert p["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpTokens": "required",
                                    "HttpPutResponseHopLimit": 1, "InstanceMetadataTags": "enabled"}
    (root,) = p["BlockDeviceMappings"]
    assert root["Ebs"]["Encrypted"] is True and root["Ebs"]["VolumeType"] == "gp3"
    assert root["Ebs"]["VolumeSize"] >= 150 and root["Ebs"]["DeleteOnTermination"] is True
    assert p["Monitoring"] is True
    assert p["InstanceInitiatedShutdownBehavior"] == "stop"
    assert "KeyName" not in p  # no key pair: EC2 Instance Connect pushes a short-lived key
    (nic,) = p["NetworkInterfaces"]
    assert nic["AssociatePublicIpAddress"] is True  # outbound downloads without NAT; SG admits only EICE
    assert "Fn::ImportValue" in nic["SubnetId"]


def test_ami_parameters_per_family(kit):
    assert IMAGE_FAMILIES["gpu-x86"].ssm_parameter == \
        "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    for backend, stack in STACKS:
        fam = kit.stacks[stack].family
        assert kit.stacks[stack].server.image_parameter == fam.ssm_parameter
        assert fam.name == BACKENDS[backend].image


@pytest.mark.parametrize("backend,stack", STACKS)
def test_the_stack_waits_for_the_model_to_answer(kit, backend, stack):
    logical_id, instance = kit.one(stack, "AWS::EC2::Instance")
    assert "CreationPolicy" not in instance  # SignalResource cannot carry a failure reason
    handle_id, _ = kit.one(stack, "AWS::CloudFormation::WaitConditionHandle")
    wait_id, wait = kit.one(stack, "AWS::CloudFormation::WaitCondition")
    p = wait["Properties"]
    assert p["Handle"] == {"Ref": handle_id} and p["Count"] == 1
    assert wait["DependsOn"] == [logical_id]  # its clock starts once the instance runs
    seconds = int(p["Timeout"])
    assert 30 * 60 <= seconds <= 180 * 60
    # A replaced instance (new user data, new digest) gets a new handle and condition to wait on.
    digest = logical_id.removeprefix("ServerInstance")
    assert handle_id == f"ServerReadyHandle{digest}" and wait_id == f"ServerReady{digest}"
    # The instance signals that handle; the URL is the handle's Ref in the user data.
    ud = instance["Properties"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    i = ud.index({"Ref": handle_id})
    assert ud[i - 1].endswith("KIT_SIGNAL_URL='") and ud[i + 1].startswith("'\n")
    env = kit_env(user_data(instance))
    assert env["KIT_STACK"] == stack and env["KIT_REGION"] == "us-east-1"
    assert int(env["KIT_READY_TIMEOUT_S"]) < seconds  # fail with a reason before CFN times out


def test_instance_logical_id_does_not_depend_on_token_numbering(tmp_path):
    """The digest leaves out the handle URL (a token whose number depends on what else is built):
    selecting other backends must not replace a running instance."""
    alone = synth(tmp_path / "a", backends="g6")
    many = synth(tmp_path / "b", backends="bedrock,sagemaker,g6,trn1")
    assert alone.one("G6Stack", "AWS::EC2::Instance")[0] == many.one("G6Stack", "AWS::EC2::Instance")[0]


@pytest.mark.parametrize("backend,stack", STACKS)
def test_security_group_only_ssh_from_the_endpoint(kit, backend, stack):
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    (sg_ref,) = instance["Properties"]["NetworkInterfaces"][0]["GroupSet"]
    sg_id = sg_ref["Fn::GetAtt"][0]
    sg = kit.templates[stack]["Resources"][sg_id]["Properties"]
    assert "SecurityGroupIngress" not in sg
    ingress = kit.resources(stack, "AWS::EC2::SecurityGroupIngress")
    assert len(ingress) == 1
    (rule,) = [r["Properties"] for r in ingress.values()]
    assert rule["IpProtocol"] == "tcp" and rule["FromPort"] == rule["ToPort"] == 22
    assert "EiceSecurityGroup" in rule["SourceSecurityGroupId"]["Fn::ImportValue"]
    assert rule["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}
    assert sorted((e["FromPort"], e["CidrIp"]) for e in sg["SecurityGroupEgress"]) == \
        [(80, "0.0.0.0/0"), (443, "0.0.0.0/0")]


@pytest.mark.parametrize("backend,stack", STACKS)
def test_instance_role_least_privilege(kit, backend, stack):
    roles = kit.resources(stack, "AWS::IAM::Role")
    (role_id, role), = [(k, v) for k, v in roles.items() if "ec2.amazonaws.com" in str(v)]
    managed = [str(m) for m in role["Properties"]["ManagedPolicyArns"]]
    assert len(managed) == 1 and "AmazonSSMManagedInstanceCore" in managed[0]
    statements = [s for pol in kit.resources(stack, "AWS::IAM::Policy").values()
                  if {"Ref": role_id} in pol["Properties"]["Roles"]
                  for s in pol["Properties"]["PolicyDocument"]["Statement"]]
    by_action = {}
    for s in statements:
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]):
            by_action[a] = s["Resource"]
    # Reading the one token secret is all it needs (the wait-condition handle needs no IAM).
    assert set(by_action) == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
    secret_arn = str(by_action["secretsmanager:GetSecretValue"])
    assert ":secret:inference-kit/hf-token-??????" in secret_arn  # only the one secret
    assert "*" not in [r for s in statements for r in ([s["Resource"]] if isinstance(s["Resource"], (str, dict))
                                                      else s["Resource"])]
    assert "AdministratorAccess" not in str(role) and "FullAccess" not in str(role)


def test_g6_user_data_starts_vllm_with_gemma4_tool_calling(kit):
    _, instance = kit.one("G6Stack", "AWS::EC2::Instance")
    text = user_data(instance)
    env = kit_env(text)
    assert env["KIT_VLLM_ARGS"] == "'--enable-auto-tool-choice --tool-call-parser gemma4'"
    assert env["KIT_PORT"] == "8000" and env["KIT_MODEL"] == BACKENDS["g6"].model_id
    assert env["KIT_VLLM_VERSION"] == "0.30.0"
    # Installing at boot gives the same stack as the vllm-cuda image (one set of pins).
    from ami import pins
    assert (env["KIT_UV_VERSION"], env["KIT_PYTHON_VERSION"]) == (pins.UV_VERSION, pins.PYTHON_VERSION)
    assert env["KIT_VLLM_VERSION"] == pins.VLLM_VERSION
    # The engine binds to loopback only and passes the flags through.
    assert '--host 127.0.0.1 --port "$KIT_PORT"' in text
    assert "$KIT_VLLM_ARGS" in text
    # systemd unit, log file, readiness on /health and a real chat completion, cfn-signal.
    for needle in ("kit-engine.service", "StandardOutput=append:$KIT_ENGINE_LOG", "/v1/chat/completions",
                   "${KIT_HEALTH_PATH:-/health}", '"$KIT_SIGNAL_URL"', '"Reason": sys.argv[2][:900]',
                   "kit-guard.timer"):
        assert needle in text, needle
    assert not re.search(r"set -[a-z]*x|bash -x|xtrace", text.replace("Never turn on xtrace", ""))  # no trace


@pytest.mark.parametrize("backend,stack", STACKS)
def test_user_data_fits_and_holds_no_secret(kit, backend, stack):
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    text = user_data(instance)
    assert len(text.encode()) < USER_DATA_LIMIT
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", text)
    assert "{{resolve:secretsmanager" not in text  # fetched at boot with the instance role instead
    assert kit_env(text)["KIT_HF_SECRET"] == "inference-kit/hf-token"


@pytest.mark.parametrize("backend,stack", STACKS)
def test_rendered_user_data_is_shellcheck_clean(kit, backend, stack, tmp_path):
    shellcheck = require_binary(str(ROOT / ".venv/bin/shellcheck"))
    text = kit.stacks[stack].server.user_data_text
    path = tmp_path / f"{backend}-user-data.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    r = subprocess.run([shellcheck, "-s", "bash", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_heredoc_terminator_in_a_script_is_refused():
    with pytest.raises(ValueError, match="KIT_EOF"):
        render_user_data("../tests/stacks/data/kit_eof.txt", {})


def test_bad_user_data_variable_name_is_refused():
    with pytest.raises(ValueError, match="KIT_NAME"):
        render_user_data("engine-vllm-gpu.sh", {"PATH": "/tmp"})


@pytest.mark.parametrize("backend,stack", STACKS)
def test_guardrails_idle_alarm_and_ttl_schedule(kit, backend, stack):
    logical_id, instance = kit.one(stack, "AWS::EC2::Instance")
    _, alarm = kit.one(stack, "AWS::CloudWatch::Alarm")
    a = alarm["Properties"]
    assert a["MetricName"] == "CPUUtilization" and a["Statistic"] == "Maximum" and a["Period"] == 60
    assert a["ComparisonOperator"] == "LessThanThreshold" and a["Threshold"] == 5
    assert a["EvaluationPeriods"] == 60 + 30 and a["TreatMissingData"] == "notBreaching"
    assert a["DatapointsToAlarm"] == a["EvaluationPeriods"]
    assert a["Dimensions"] == [{"Name": "InstanceId", "Value": {"Ref": logical_id}}]
    assert "ec2:stop" in str(a["AlarmActions"])
    # The on-instance check reads its limits from instance tags (no replacement when they change).
    tags = {t["Key"]: t["Value"] for t in instance["Properties"]["Tags"]}
    assert tags[IDLE_TAG] == "60" and "KIT_IDLE_MINUTES" not in kit_env(user_data(instance))
    # TTL: the instance tag read by the on-instance guard, and a Scheduler stop at the same time.
    assert tags[TTL_TAG] == "1772395260"  # 2026-03-01T20:01:00Z
    _, schedule = kit.one(stack, "AWS::Scheduler::Schedule")
    s = schedule["Properties"]
    assert s["ScheduleExpression"] == "at(2026-03-01T20:01:00)" and s["ScheduleExpressionTimezone"] == "UTC"
    assert s["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert s["Target"]["Arn"]["Fn::Join"][1][-1] == ":scheduler:::aws-sdk:ec2:stopInstances"
    assert '"InstanceIds":["' in str(s["Target"]["Input"]) and logical_id in str(s["Target"]["Input"])
    role_id = s["Target"]["RoleArn"]["Fn::GetAtt"][0]
    role = kit.templates[stack]["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "scheduler.amazonaws.com"}
    (policy,) = [p for p in kit.resources(stack, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    (stmt,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert stmt["Action"] == "ec2:StopInstances"
    assert {"Ref": logical_id} in stmt["Resource"]["Fn::Join"][1]  # this instance only


def test_guardrails_can_be_disabled_and_clamped(tmp_path):
    off = synth(tmp_path / "off", backends="g6", idle_stop_minutes=0, ttl_hours=0)
    assert not off.resources("G6Stack", "AWS::CloudWatch::Alarm")
    assert not off.resources("G6Stack", "AWS::Scheduler::Schedule")
    _, instance = off.one("G6Stack", "AWS::EC2::Instance")
    assert TTL_TAG not in str(instance["Properties"]["Tags"])
    assert {"Key": IDLE_TAG, "Value": "0"} in instance["Properties"]["Tags"]
    assert off.templates["G6Stack"]["Outputs"]["TtlExpiresAt"]["Value"] == "disabled"
    long = synth(tmp_path / "long", backends="g6", idle_stop_minutes=1440)
    _, alarm = long.one("G6Stack", "AWS::CloudWatch::Alarm")
    assert alarm["Properties"]["EvaluationPeriods"] == 1440  # CloudWatch: at most one day
    short = synth(tmp_path / "short", backends="g6", idle_stop_minutes=5)
    _, alarm = short.one("G6Stack", "AWS::CloudWatch::Alarm")
    assert alarm["Properties"]["EvaluationPeriods"] == 45 + 15  # not before provisioning could end


@pytest.mark.parametrize("backend,stack", STACKS)
def test_ec2_outputs(kit, backend, stack):
    out = {k: v["Value"] for k, v in kit.templates[stack]["Outputs"].items()}
    logical_id, _ = kit.one(stack, "AWS::EC2::Instance")
    assert out["InstanceId"] == {"Ref": logical_id}
    assert out["Port"] == "8000" and out["SshUser"] == "ubuntu"
    assert out["InstanceType"] == BACKENDS[backend].instance_type
    assert out["ModelId"] == BACKENDS[backend].model_id and out["IdleStopMinutes"] == "60"


def test_instance_type_and_az_overrides(tmp_path):
    s = synth(tmp_path, backends="g6,trn1", g6_instance_type="g6.2xlarge",
              azs="us-east-1a,us-east-1d", trn1_az="us-east-1d")
    _, g6 = s.one("G6Stack", "AWS::EC2::Instance")
    _, trn1 = s.one("Trn1Stack", "AWS::EC2::Instance")
    assert g6["Properties"]["InstanceType"] == "g6.2xlarge"
    assert g6["Properties"]["AvailabilityZone"] == "us-east-1a"
    assert trn1["Properties"]["AvailabilityZone"] == "us-east-1d"
    subnets = s.resources("NetworkStack", "AWS::EC2::Subnet")
    assert sorted({v["Properties"]["AvailabilityZone"] for v in subnets.values()}) == ["us-east-1a", "us-east-1d"]


@pytest.mark.parametrize("backend,stack", STACKS)
def test_every_variable_the_scripts_read_is_defined(kit, backend, stack):
    """Under `set -u` an undefined KIT_* variable would kill provisioning on the instance."""
    text = kit.stacks[stack].server.user_data_text
    used = set(re.findall(r"\$\{?(KIT_[A-Z0-9_]+)", text))
    assigned = set(re.findall(r"^\s*(?:local\s+|export\s+)?(KIT_[A-Z0-9_]+)=", text, re.M))
    defaulted = set(re.findall(r"\$\{(KIT_[A-Z0-9_]+):-", text))
    missing = used - assigned - defaulted
    assert not missing, f"{stack}: read but never set: {sorted(missing)}"
