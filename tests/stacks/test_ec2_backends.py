"""The four EC2 backends, all built by the one InferenceInstance construct: their templates read with
aws_cdk.assertions (kit.template), and the user data they carry run for real in a scratch root."""
from __future__ import annotations

import re
import subprocess

import pytest
from aws_cdk.assertions import Match

from kit.catalog import BACKENDS
from stacks.guardrails import IDLE_TAG, TTL_TAG
from kit.image_families import IMAGE_FAMILIES
from stacks.inference_instance import USER_DATA_LIMIT, render_user_data
from tests.conftest import require_binary
from tests.stacks.conftest import EC2_STACKS, ROOT, SYSTEMD_PATH, synth

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
    t = kit.template(stack)
    t.resource_count_is("AWS::EC2::Instance", 1)
    t.has_resource_properties("AWS::EC2::Instance", {
        "InstanceType": BACKENDS[backend].instance_type,
        "MetadataOptions": {"HttpEndpoint": "enabled", "HttpTokens": "required",
                            "HttpPutResponseHopLimit": 1, "InstanceMetadataTags": "enabled"},
        "BlockDeviceMappings": [Match.object_like({"Ebs": Match.object_like(
            {"Encrypted": True, "VolumeType": "gp3", "DeleteOnTermination": True})})],
        "Monitoring": True,
        "InstanceInitiatedShutdownBehavior": "stop",  # an OS shutdown (idle/TTL guard) stops, never terminates
        "KeyName": Match.absent(),  # no key pair: EC2 Instance Connect pushes a short-lived key
        # Outbound downloads without NAT; the security group admits only the Instance Connect Endpoint.
        "NetworkInterfaces": [Match.object_like({"AssociatePublicIpAddress": True,
                                                 "SubnetId": {"Ref": Match.any_value()}})],
    })
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    (root,) = instance["Properties"]["BlockDeviceMappings"]
    assert root["Ebs"]["VolumeSize"] >= 150
    # AMI id resolved at deploy time: a public DLAMI from its SSM-typed stack parameter; the kit's
    # own images through Custom::ImagesReady, which reads their parameter (stacks/image_guard.py).
    image = instance["Properties"]["ImageId"]
    if "Ref" in image:
        t.has_parameter(image["Ref"], {"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
                                       "Default": kit.stacks[stack].server.image_parameter})
        assert kit.stacks[stack].server.image_parameter.startswith("/aws/service/")
    else:
        check, attr = image["Fn::GetAtt"]
        assert attr == "BootAmi"
        props = kit.templates[stack]["Resources"][check]["Properties"]
        (own,) = [i for i in props["Images"] if i["Key"] == "BootAmi"]
        assert own["Parameter"] == kit.stacks[stack].server.image_parameter


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
    # Gate 1 (every creation of the instance, replacements included): tests/stacks/test_readiness_gate.py.
    assert instance["CreationPolicy"]["ResourceSignal"]["Count"] == 1
    handle_id, _ = kit.one(stack, "AWS::CloudFormation::WaitConditionHandle")
    wait_id, wait = kit.one(stack, "AWS::CloudFormation::WaitCondition")
    p = wait["Properties"]
    assert p["Handle"] == {"Ref": handle_id} and p["Count"] == 1
    # Both gates run while the instance boots (the condition must not wait for the instance's own gate).
    assert logical_id not in wait.get("DependsOn", [])
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
    t = kit.template(stack)
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    (sg_ref,) = instance["Properties"]["NetworkInterfaces"][0]["GroupSet"]
    sg_id = sg_ref["Fn::GetAtt"][0]
    t.resource_count_is("AWS::EC2::SecurityGroup", 1)
    t.has_resource_properties("AWS::EC2::SecurityGroup", {
        "SecurityGroupIngress": Match.absent(),
        "SecurityGroupEgress": [Match.object_like({"IpProtocol": "tcp", "FromPort": port, "ToPort": port,
                                                   "CidrIp": "0.0.0.0/0"}) for port in (443, 80)],
    })
    t.resource_count_is("AWS::EC2::SecurityGroupIngress", 1)
    t.has_resource_properties("AWS::EC2::SecurityGroupIngress", {
        "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
        "SourceSecurityGroupId": {"Fn::ImportValue": Match.string_like_regexp("EiceSecurityGroup")},
        "GroupId": {"Fn::GetAtt": [sg_id, "GroupId"]},
    })


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
    # Reading the one token secret, and signalling its own creation policy (the wait-condition
    # handle needs no IAM).
    assert set(by_action) == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret",
                              "cloudformation:SignalResource"}
    signal_arn = str(by_action["cloudformation:SignalResource"])
    assert f":stack/{stack}/*" in signal_arn  # its own stack only
    secret_arn = str(by_action["secretsmanager:GetSecretValue"])
    assert ":secret:inference-kit/hf-token-??????" in secret_arn  # only the one secret
    assert "*" not in [r for s in statements for r in ([s["Resource"]] if isinstance(s["Resource"], (str, dict))
                                                      else s["Resource"])]
    assert "AdministratorAccess" not in str(role) and "FullAccess" not in str(role)


def test_g6_kit_env_carries_the_catalogs_engine_settings_and_the_pins(kit):
    _, instance = kit.one("G6Stack", "AWS::EC2::Instance")
    env = kit_env(user_data(instance))
    assert env["KIT_VLLM_ARGS"] == "'--enable-auto-tool-choice --tool-call-parser gemma4'"  # the seed's g6 run
    assert env["KIT_PORT"] == "8000" and env["KIT_MODEL"] == BACKENDS["g6"].model_id
    assert env["KIT_VLLM_VERSION"] == "0.30.0"
    # Installing at boot gives the same stack as the vllm-cuda image (one set of pins).
    from kit import pins
    assert (env["KIT_UV_VERSION"], env["KIT_PYTHON_VERSION"]) == (pins.UV_VERSION, pins.PYTHON_VERSION)
    assert env["KIT_VLLM_VERSION"] == pins.VLLM_VERSION


# What a backend of each image family (catalog ``Backend.image``) starts from its rendered user data,
# run for real (kit-boot serve): the model server's command line as the instance would exec it, on
# the backend's default instance type. Expected values are the documented facts: Gemma 4's vLLM
# tool-call parser (the seed's g6 run), Turing's Triton attention in fp16 (gpu-arm64: g5g), and the
# Neuron runtime's degrees up to 2 NeuronCores (inf2.xlarge, trn1.2xlarge) on the row's platform.
SERVED = {
    # unpinned: the commit the first download resolved (tests/stacks/hf_stand_in.py NEWEST), kept
    "gpu-x86": "{opt}/vllm/bin/vllm serve {model} --served-model-name {model} --host 127.0.0.1 --port 8000 "
          "--max-model-len 4096 --revision {rev} --tokenizer-revision {rev} "
          "--enable-auto-tool-choice --tool-call-parser gemma4",
    "gpu-arm64": "{opt}/vllm/bin/vllm serve {model} --served-model-name {model} --host 127.0.0.1 --port 8000 "
           "--max-model-len 4096 --revision {rev} --tokenizer-revision {rev} --attention-backend TRITON_ATTN "
           "--dtype float16 --enable-auto-tool-choice --tool-call-parser gemma4",
    "neuron": "{opt}/neuron/bin/kit-neuron-serve --model {opt}/models/{model} --served-model-name {model} "
              "--host 127.0.0.1 --port 8000 --tp-degrees 1,2 --platform {platform} --tp-degree 2 --batch-size 4 "
              "--max-total-tokens 4096 --prompt-buckets 128,512,2048",  # kit/fit.py neuron_compile
}
# The Neuron platform each Neuron instance family compiles for (the runtime's names: inf2, trn1).
PLATFORM = {"inf2": "inf2", "trn1": "trn1", "trn1n": "trn1"}


@pytest.mark.parametrize("backend,stack", STACKS)
def test_rendered_user_data_serves_the_model_with_the_catalogs_settings(kit, backend, stack, tmp_path):
    """The user data as the template carries it, run in a scratch root (its absolute paths moved
    under tmp_path, `aws` and the engine binaries are recording stand-ins), with `kit-boot serve`
    instead of `provision`: the engine command line and the token it gets are what the instance runs."""
    from tests.stacks.test_userdata import run_bash

    opt, record = tmp_path / "opt", tmp_path / "exec.txt"
    text = kit.stacks[stack].server.user_data_text
    for path in ("/etc/inference-kit", "/usr/local/lib/inference-kit", "/usr/local/bin", "/opt/inference-kit",
                 "/var/lib/inference-kit", "/var/log/inference-kit"):
        text = text.replace(path, f"{tmp_path}{path.replace('/opt/inference-kit', '/opt')}")
    assert text.rstrip().endswith(f"exec {tmp_path}/usr/local/bin/kit-boot provision")
    text = text.rstrip().removesuffix("provision") + "serve\n"
    stub = f'#!/bin/bash\necho "$0 $*" >> {record}\necho "token=${{HF_TOKEN:+set}}" >> {record}\n'
    from tests.stacks.hf_stand_in import NEWEST, fake_hf

    bins = {"vllm/bin/vllm": stub, "neuron/bin/kit-neuron-serve": stub}
    for venv in ("vllm", "neuron"):
        fake_hf(opt / venv / "bin/hf", tmp_path / "hf-calls")
    (tmp_path / "var/lib/inference-kit").mkdir(parents=True)  # provisioning made it
    for rel, body in bins.items():
        (opt / rel).parent.mkdir(parents=True, exist_ok=True)
        (opt / rel).write_text(body)
        (opt / rel).chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "usr/local/bin").mkdir(parents=True)  # exists on every image
    (tmp_path / "bin/aws").write_text("#!/bin/bash\necho hf_TESTTOKEN1234567890abcdef\n")
    (tmp_path / "bin/aws").chmod(0o755)
    (tmp_path / "user-data.sh").write_text(text)
    env = {"PATH": f"{tmp_path}/bin:{SYSTEMD_PATH}"}  # systemd's PATH, no HOME (cloud-init's final stage)
    r = run_bash(["bash", str(tmp_path / "user-data.sh")], env=env)
    assert r.returncode == 0, r.stderr
    row = BACKENDS[backend]
    want = SERVED[row.image].format(opt=opt, model=row.model_id, rev=NEWEST,
                                    platform=PLATFORM.get(row.instance_type.split(".")[0]))
    assert record.read_text().splitlines() == [want, "token=set"]
    assert "hf_TEST" not in r.stdout + r.stderr


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
    t = kit.template(stack)
    t.resource_count_is("AWS::CloudWatch::Alarm", 1)
    # Idle: CPU below 5 % for the idle minutes plus the provisioning allowance (60 + 30), then stop.
    t.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "CPUUtilization", "Statistic": "Maximum", "Period": 60,
        "ComparisonOperator": "LessThanThreshold", "Threshold": 5,
        "EvaluationPeriods": 60 + 30, "DatapointsToAlarm": 60 + 30, "TreatMissingData": "notBreaching",
        "Dimensions": [{"Name": "InstanceId", "Value": {"Ref": logical_id}}],
        "AlarmActions": ["arn:aws:automate:us-east-1:ec2:stop"],  # the EC2 stop action (CloudWatch docs)
    })
    # The on-instance check reads its limits from instance tags (no replacement when they change).
    tags = {t["Key"]: t["Value"] for t in instance["Properties"]["Tags"]}
    assert tags[IDLE_TAG] == "60" and "KIT_IDLE_MINUTES" not in kit_env(user_data(instance))
    # TTL: the instance tag read by the on-instance guard, and a Scheduler stop at the same time.
    assert tags[TTL_TAG] == "1772395260"  # 2026-03-01T20:01:00Z
    t.resource_count_is("AWS::Scheduler::Schedule", 1)
    t.has_resource_properties("AWS::Scheduler::Schedule", {
        "ScheduleExpression": "at(2026-03-01T20:01:00)", "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"}})
    _, schedule = kit.one(stack, "AWS::Scheduler::Schedule")
    s = schedule["Properties"]
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
    assert g6["Properties"]["InstanceType"] == "g6.2xlarge"
    # The AZ is chosen at deploy time where the type is offered (tests/stacks/test_az_choice.py);
    # trn1_az is the preference handed to that choice.
    choices = {stack: next(iter(s.resources(stack, "Custom::AzChoice").values()))["Properties"]
               for stack in ("G6Stack", "Trn1Stack")}
    assert choices["G6Stack"]["InstanceTypes"] == ["g6.2xlarge"] and choices["G6Stack"]["PreferredAz"] == ""
    assert choices["Trn1Stack"]["PreferredAz"] == "us-east-1d"
    subnets = s.resources("NetworkStack", "AWS::EC2::Subnet")
    assert sorted({v["Properties"]["AvailabilityZone"] for v in subnets.values()}) == ["us-east-1a", "us-east-1d"]


@pytest.mark.parametrize("backend,stack", STACKS)
def test_every_variable_the_scripts_read_is_defined(kit, backend, stack):
    """Under `set -u` an undefined KIT_* variable would kill provisioning on the instance."""
    text = kit.stacks[stack].server.user_data_text
    used = set(re.findall(r"\$\{?(KIT_[A-Z0-9_]+)", text))
    assigned = set(re.findall(r"^\s*(?:local\s+|export\s+)?(KIT_[A-Z0-9_]+)=", text, re.M))
    # ${VAR:-default} and ${VAR:+word} expand without error when VAR is unset, even under `set -u`
    defaulted = set(re.findall(r"\$\{(KIT_[A-Z0-9_]+):[-+]", text))
    missing = used - assigned - defaulted
    assert not missing, f"{stack}: read but never set: {sorted(missing)}"
