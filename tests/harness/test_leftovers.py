"""python -m harness leftovers against an account replayed through botocore's
Stubber (tests/harness/aws_replay.py validates every request and response against the model).

The "everything left" account holds one of each kind a failed or partial teardown leaves, with
the shapes of the services' answers (values as in the AWS CLI's examples, with the kit's names):
a stopped G6Stack instance whose stack is DELETE_FAILED and its gp3 root volume, a SageMaker
endpoint left by a ROLLBACK_FAILED stack (docs/stacks.md) with its config and model, the kit's
AMI and snapshot, the package bucket with objects, the image parameters, Image Builder's own
pipeline log group (never expiring), the retained TTL schedule, every Image Builder resource of a
pipeline, and the token secret the user made. The "nothing left" account answers every call with
nothing."""
from __future__ import annotations

import datetime as dt
import io
import json
import re

from harness.account import leftovers
from tests.harness.aws_replay import Error, Replay

ACCOUNT = "123456789012"
R = "us-east-1"
T = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
KIT = [{"Key": "project", "Value": "aws-inference-kit"}]
PRICES = {"g6.xlarge": 0.8048, "ml.g6.xlarge": 1.1267}  # harness/cost/price_snapshot.json (seed 000)
IB = f"arn:aws:imagebuilder:{R}:{ACCOUNT}"


def full_account(instance_state="stopped", secret_tags=None):
    def cloudformation(op, p):
        assert op == "describe_stacks"
        return {"Stacks": [
            {"StackName": "G6Stack", "StackId": f"arn:aws:cloudformation:{R}:{ACCOUNT}:stack/G6Stack/1",
             "CreationTime": T, "StackStatus": "DELETE_FAILED", "Tags": KIT},
            {"StackName": "CDKToolkit", "StackId": f"arn:aws:cloudformation:{R}:{ACCOUNT}:stack/CDKToolkit/2",
             "CreationTime": T, "StackStatus": "CREATE_COMPLETE"}]}

    def ec2(op, p):
        if op == "describe_instances":
            inst = {"InstanceId": "i-0a1b2c3d4e5f60718", "InstanceType": "g6.xlarge",
                    "State": {"Code": 80 if instance_state == "stopped" else 16, "Name": instance_state},
                    "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
                        "VolumeId": "vol-049df61146c4d7901", "Status": "attached", "DeleteOnTermination": True}}],
                    "Tags": KIT + [{"Key": "aws:cloudformation:stack-name", "Value": "G6Stack"}]}
            if instance_state == "running":
                inst["PublicIpAddress"] = "203.0.113.25"
            return {"Reservations": [{"ReservationId": "r-1", "OwnerId": ACCOUNT, "Instances": [inst]}]}
        if op == "describe_volumes":
            return {"Volumes": [{"VolumeId": "vol-049df61146c4d7901", "Size": 150, "VolumeType": "gp3",
                                 "State": "in-use", "AvailabilityZone": "us-east-1c", "Encrypted": True,
                                 "Attachments": [{"InstanceId": "i-0a1b2c3d4e5f60718", "VolumeId": "vol-049df61146c4d7901",
                                                  "State": "attached", "DeleteOnTermination": True}], "Tags": KIT}]}
        if op == "describe_images":
            return {"Images": [{"ImageId": "ami-0abcdef1234567890", "State": "available", "OwnerId": ACCOUNT,
                                "CreationDate": "2026-12-01T10:02:11.000Z", "Name": "inference-kit-vllm-sm75-gpu-test-x",
                                "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
                                    "SnapshotId": "snap-0aaaaaaaaaaaaaaaa", "VolumeSize": 150}}],
                                "Tags": KIT + [{"Key": "kit-image", "Value": "vllm-sm75"}]}]}
        if op == "describe_snapshots":
            if "Filters" in p:  # tagged ones: none besides the AMI's
                return {"Snapshots": []}
            return {"Snapshots": [{"SnapshotId": "snap-0aaaaaaaaaaaaaaaa", "VolumeId": "vol-ffffffff",
                                   "State": "completed", "VolumeSize": 150, "FullSnapshotSizeInBytes": 34359738368,
                                   "StartTime": T, "Progress": "100%", "OwnerId": ACCOUNT, "Encrypted": True,
                                   "Description": "Created by CreateImage(i-0a1b2c3d4e5f60718) for ami-0abcdef1234567890"}]}
        raise AssertionError(op)

    def sagemaker(op, p):
        if op == "list_endpoints":
            return {"Endpoints": [{"EndpointName": "SageMakerStack-ml-g6-xlarge",
                                   "EndpointArn": f"arn:aws:sagemaker:{R}:{ACCOUNT}:endpoint/sagemakerstack-ml-g6-xlarge",
                                   "CreationTime": T, "LastModifiedTime": T, "EndpointStatus": "InService"}]}
        if op == "describe_endpoint":
            return {"EndpointName": p["EndpointName"], "EndpointArn": f"arn:aws:sagemaker:{R}:{ACCOUNT}:endpoint/x",
                    "EndpointConfigName": "EndpointConfigMlG6Xlarge-AbCdEf", "EndpointStatus": "InService",
                    "CreationTime": T, "LastModifiedTime": T}
        if op == "describe_endpoint_config":
            return {"EndpointConfigName": p["EndpointConfigName"],
                    "EndpointConfigArn": f"arn:aws:sagemaker:{R}:{ACCOUNT}:endpoint-config/x", "CreationTime": T,
                    "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": "ModelMlG6Xlarge-AbCdEf",
                                            "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}]}
        if op == "describe_model":
            return {"ModelName": p["ModelName"], "CreationTime": T,
                    "ModelArn": f"arn:aws:sagemaker:{R}:{ACCOUNT}:model/{p['ModelName'].lower()}",
                    "ExecutionRoleArn": f"arn:aws:iam::{ACCOUNT}:role/x"}
        raise AssertionError(op)

    def s3(op, p):
        assert op == "list_objects_v2"
        if p["Bucket"] != f"inference-kit-packages-{ACCOUNT}-{R}":
            return Error("NoSuchBucket", "The specified bucket does not exist", 404)
        return {"Contents": [{"Key": "package/w4a16-emb4/7/model.safetensors", "Size": 3 * 1024 ** 3,
                              "LastModified": T, "StorageClass": "STANDARD"},
                             {"Key": "package/w4a16-emb4/7/manifest.json", "Size": 2048, "LastModified": T}],
                "KeyCount": 2, "IsTruncated": False}

    def ssm(op, p):
        assert op == "describe_parameters"
        return {"Parameters": [{"Name": "/imagebuilder/inference-kit/ami/vllm-sm75", "Type": "String",
                                "Tier": "Standard", "DataType": "aws:ec2:image", "Version": 1},
                               {"Name": "/inference-kit/package/w4a16-emb4", "Type": "String", "Tier": "Standard",
                                "DataType": "text", "Version": 3}]}

    def logs(op, p):
        assert op == "describe_log_groups"
        if p["logGroupNamePrefix"] == "/aws/imagebuilder/pipeline/inference-kit-":
            return {"logGroups": [{"logGroupName": "/aws/imagebuilder/pipeline/inference-kit-vllm-sm75-build",
                                   "creationTime": 1764583200000, "storedBytes": 52428800,
                                   "arn": f"arn:aws:logs:{R}:{ACCOUNT}:log-group:/aws/imagebuilder/pipeline/x:*"}]}
        return {"logGroups": []}

    def scheduler(op, p):
        if op == "list_schedules":
            return {"Schedules": [
                {"Name": "SageMakerStack-TtlMlG6XlargeTtlSchedule-1ABCDEF", "GroupName": "default", "State": "ENABLED",
                 "Target": {"Arn": "arn:aws:scheduler:::aws-sdk:sagemaker:deleteEndpoint"}},
                {"Name": "someone-elses-backup", "GroupName": "default", "State": "ENABLED",
                 "Target": {"Arn": "arn:aws:scheduler:::aws-sdk:ec2:createSnapshot"}}]}
        assert op == "get_schedule" and p["Name"].startswith("SageMakerStack")
        return {"Name": p["Name"], "GroupName": "default", "ScheduleExpression": "rate(15 minutes)",
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "Description": "Delete SageMaker endpoint SageMakerStack-ml-g6-xlarge from its TTL (2026-12-01T17:00:00Z)",
                "Target": {"Arn": "arn:aws:scheduler:::aws-sdk:sagemaker:deleteEndpoint",
                           "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/x",
                           "Input": json.dumps({"EndpointName": "SageMakerStack-ml-g6-xlarge"})}}

    def imagebuilder(op, p):
        pname = "inference-kit-vllm-sm75-build"
        lists = {
            "list_image_pipelines": ("imagePipelineList", f"{IB}:image-pipeline/{pname}"),
            "list_image_recipes": ("imageRecipeSummaryList", f"{IB}:image-recipe/{pname}/1.0.4660"),
            "list_components": ("componentVersionList", f"{IB}:component/inference-kit-vllm-sm75-build/1.0.1"),
            "list_infrastructure_configurations": ("infrastructureConfigurationSummaryList",
                                                   f"{IB}:infrastructure-configuration/{pname}"),
            "list_distribution_configurations": ("distributionConfigurationSummaryList",
                                                 f"{IB}:distribution-configuration/{pname}"),
            "list_lifecycle_policies": ("lifecyclePolicySummaryList", f"{IB}:lifecycle-policy/{pname}"),
            "list_images": ("imageVersionList", f"{IB}:image/{pname}/1.0.4660"),
        }
        if op in lists:
            key, arn = lists[op]
            item = {"arn": arn, "name": pname}
            if op == "list_components":
                item = {**item, "name": "inference-kit-vllm-sm75-build", "version": "1.0.1"}
            return {key: [item, {**item, "arn": arn.replace("inference-kit", "other-team"),
                                                   "name": "other-team-pipeline"}]}
        assert op == "list_image_build_versions"
        return {"requestId": "r", "imageSummaryList": [{"arn": f"{IB}:image/{pname}/1.0.4660/1", "name": pname,
                                                        "version": "1.0.4660/1", "state": {"status": "AVAILABLE"}}]}

    def secretsmanager(op, p):
        assert op == "describe_secret"
        return {"ARN": f"arn:aws:secretsmanager:{R}:{ACCOUNT}:secret:inference-kit/hf-token-AbCdEf",
                "Name": "inference-kit/hf-token", **({"Tags": secret_tags} if secret_tags else {})}

    def tagging(op, p):
        assert op == "get_resources"
        return {"ResourceTagMappingList": [
            # the tagging API's ARN holds the endpoint's name in lower case
            {"ResourceARN": f"arn:aws:sagemaker:{R}:{ACCOUNT}:endpoint/sagemakerstack-ml-g6-xlarge", "Tags": KIT},
            {"ResourceARN": f"arn:aws:sagemaker:{R}:{ACCOUNT}:endpoint-config/endpointconfigmlg6xlarge-abcdef", "Tags": KIT},
            {"ResourceARN": f"arn:aws:sagemaker:{R}:{ACCOUNT}:model/modelmlg6xlarge-abcdef", "Tags": KIT},
            {"ResourceARN": f"arn:aws:ec2:{R}:{ACCOUNT}:instance/i-0a1b2c3d4e5f60718", "Tags": KIT},
            {"ResourceARN": f"arn:aws:cloudwatch:{R}:{ACCOUNT}:alarm:Inf2Stack-GuardrailsIdle-XYZ",
             "Tags": KIT + [{"Key": "aws:cloudformation:stack-name", "Value": "Inf2Stack"}]},
            {"ResourceARN": f"arn:aws:lambda:{R}:{ACCOUNT}:function:G6Stack-AzChoiceFunction-XYZ",
             "Tags": KIT + [{"Key": "aws:cloudformation:stack-name", "Value": "G6Stack"}]}]}

    return {"cloudformation": cloudformation, "ec2": ec2, "sagemaker": sagemaker, "s3": s3, "ssm": ssm, "logs": logs,
            "scheduler": scheduler, "imagebuilder": imagebuilder, "secretsmanager": secretsmanager,
            "resourcegroupstaggingapi": tagging, "kms": no_kit_keys}


def no_kit_keys(op, p):
    """An account whose only alias is an AWS managed key's."""
    assert op == "list_aliases", op
    return {"Aliases": [{"AliasName": "alias/aws/ebs", "AliasArn": f"arn:aws:kms:{R}:{ACCOUNT}:alias/aws/ebs",
                         "TargetKeyId": "0b0b0b0b-1111-2222-3333-444444444444"}], "Truncated": False}


def empty_account():
    def nothing(service):
        def handler(op, p):
            if service == "s3":
                return Error("NoSuchBucket", "The specified bucket does not exist", 404)
            if service == "secretsmanager":
                return Error("ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
            keys = {"describe_stacks": "Stacks", "describe_instances": "Reservations", "describe_volumes": "Volumes",
                    "describe_images": "Images", "describe_snapshots": "Snapshots", "list_endpoints": "Endpoints",
                    "describe_parameters": "Parameters", "describe_log_groups": "logGroups",
                    "list_schedules": "Schedules", "get_resources": "ResourceTagMappingList"}
            if op in keys:
                return {keys[op]: []}
            ib = {"list_image_pipelines": "imagePipelineList", "list_image_recipes": "imageRecipeSummaryList",
                  "list_components": "componentVersionList",
                  "list_infrastructure_configurations": "infrastructureConfigurationSummaryList",
                  "list_distribution_configurations": "distributionConfigurationSummaryList",
                  "list_lifecycle_policies": "lifecyclePolicySummaryList", "list_images": "imageVersionList"}
            return {ib[op]: []}
        return handler
    handlers = {s: nothing(s) for s in ("cloudformation", "ec2", "sagemaker", "s3", "ssm", "logs", "scheduler",
                                        "imagebuilder", "secretsmanager", "resourcegroupstaggingapi")}
    return {**handlers, "kms": lambda op, p: {"Aliases": []}}


def run(handlers, argv=()):
    clients = {s: Replay(s, h) for s, h in handlers.items()}
    out = io.StringIO()
    rc = leftovers.main(["--cdk-json", "cdk.json", "--region", R, *argv], client=lambda s, r: clients[s],
                        price=lambda t, r: PRICES.get(t), account=ACCOUNT, out=out)
    return rc, out.getvalue(), clients


def entry(text, kind, name):
    """The two lines of one leftover: its row and its removal command."""
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if f" {kind} " in ln and f" {name} " in ln + " ")
    return lines[i], lines[i + 1].strip()


def test_each_kind_of_leftover_is_found_priced_and_given_its_removal_command():
    rc, out, _ = run(full_account())
    assert rc == 1
    row, rm = entry(out, "stack", "G6Stack")
    assert "DELETE_FAILED" in row and rm == "remove: npx cdk destroy G6Stack (or aws cloudformation delete-stack " \
                                          "--stack-name G6Stack --region us-east-1)"
    assert "CDKToolkit" not in out  # not the kit's
    row, rm = entry(out, "ec2 instance", "i-0a1b2c3d4e5f60718")
    assert row.lstrip().startswith("free") and "stopped" in row and "$0.00/month" in row
    assert rm == "remove: aws ec2 terminate-instances --instance-ids i-0a1b2c3d4e5f60718 --region us-east-1"
    row, rm = entry(out, "ebs volume", "vol-049df61146c4d7901")
    assert row.lstrip().startswith("BILLS") and "$12.00/month" in row  # 150 GiB x $0.08
    assert rm == "remove: goes with i-0a1b2c3d4e5f60718 when it is terminated"
    row, rm = entry(out, "sagemaker endpoint", "SageMakerStack-ml-g6-xlarge")
    assert "InService 1 x ml.g6.xlarge" in row and "$822.49/month" in row  # 1.1267 x 730
    # listed once, as ListEndpoints spells it, though the tagging API names it in lower case too
    rows = [ln for ln in out.splitlines() if re.match(r" +\w+ +sagemaker endpoint +sagemakerstack-ml-g6-xlarge ", ln, re.I)]
    assert len(rows) == 1 and "SageMakerStack-ml-g6-xlarge" in rows[0]
    assert rm == "remove: aws sagemaker delete-endpoint --endpoint-name SageMakerStack-ml-g6-xlarge --region us-east-1"
    row, rm = entry(out, "sagemaker endpoint config", "endpointconfigmlg6xlarge-abcdef")
    assert rm.startswith("remove: aws sagemaker delete-endpoint-config --endpoint-config-name")
    entry(out, "sagemaker model", "modelmlg6xlarge-abcdef")
    row, rm = entry(out, "ami", "ami-0abcdef1234567890")
    assert "aws ec2 deregister-image --image-id ami-0abcdef1234567890" in rm and "delete-snapshot" in rm
    row, rm = entry(out, "ebs snapshot", "snap-0aaaaaaaaaaaaaaaa")
    assert "32.0 GB written, of ami-0abcdef1234567890" in row and "$1.60/month" in row  # 32 GB x $0.05
    row, rm = entry(out, "s3 bucket", f"inference-kit-packages-{ACCOUNT}-{R}")
    assert "2 objects, 3.00 GB" in row and "$0.07/month" in row and rm.endswith("--force --region us-east-1")
    row, rm = entry(out, "ssm parameter", "/imagebuilder/inference-kit/ami/vllm-sm75")
    assert row.lstrip().startswith("free") and rm == ("remove: aws ssm delete-parameter --name "
                                                      "/imagebuilder/inference-kit/ami/vllm-sm75 --region us-east-1")
    row, rm = entry(out, "log group", "/aws/imagebuilder/pipeline/inference-kit-vllm-sm75-build")
    assert "0.049 GB stored, never expires" in row and row.lstrip().startswith("BILLS") and "<$0.01/month" in row
    row, rm = entry(out, "ttl schedule", "SageMakerStack-TtlMlG6XlargeTtlSchedule-1ABCDEF")
    assert rm.startswith("remove: aws scheduler delete-schedule --name SageMakerStack-TtlMlG6XlargeTtlSchedule-1ABCDEF")
    assert "someone-elses-backup" not in out and "other-team" not in out
    for kind in ("image pipeline", "image recipe", "ib component", "ib infrastructure", "ib distribution",
                 "ib lifecycle policy"):
        row, rm = entry(out, kind, "inference-kit-vllm-sm75-build")
        assert rm.startswith("remove: aws imagebuilder delete-")
    _, rm = entry(out, "ib component", "inference-kit-vllm-sm75-build")
    assert "component/inference-kit-vllm-sm75-build/1.0.1/1" in rm  # the build version is what is deleted
    row, rm = entry(out, "ib image", "inference-kit-vllm-sm75-build")
    assert f"--image-build-version-arn {IB}:image/inference-kit-vllm-sm75-build/1.0.4660/1" in rm
    row, _ = entry(out, "secret (yours)", "inference-kit/hf-token")
    assert "not counted" in row
    # a tagged alarm whose stack is gone: named, unpriced; the Lambda of a stack that still exists: not listed
    assert "alarm:Inf2Stack-GuardrailsIdle-XYZ" in out and "function:G6Stack-AzChoiceFunction" not in out
    assert out.splitlines()[-1] == ("5 still bill: $836.16/month; remove them with the commands above")  # volume, endpoint, snapshot, bucket, log group


def test_a_running_instance_bills_its_hours_and_its_public_address():
    rc, out, _ = run(full_account(instance_state="running"))
    row, _ = entry(out, "ec2 instance", "i-0a1b2c3d4e5f60718")
    # 0.8048 x 730 + 0.005 x 730 (public IPv4)
    assert row.lstrip().startswith("BILLS") and "$591.15/month" in row and "public IPv4" in row


def test_a_secret_the_kit_made_counts():
    rc, out, _ = run(full_account(secret_tags=KIT))
    row, rm = entry(out, "secret", "inference-kit/hf-token")
    assert row.lstrip().startswith("BILLS") and "$0.40/month" in row
    assert rm == "remove: aws secretsmanager delete-secret --secret-id inference-kit/hf-token --region us-east-1"


def test_nothing_left_exits_0():
    rc, out, clients = run(empty_account())
    assert rc == 0, out
    assert out.splitlines() == ["us-east-1: 0 left", "nothing bills in us-east-1"]
    # every kind was asked, with the kit's tag or names
    assert ("get_resources", {"TagFilters": [{"Key": "project", "Values": ["aws-inference-kit"]}]}) in \
        clients["resourcegroupstaggingapi"].calls
    asked = {c[0] for cl in clients.values() for c in cl.calls}
    assert {"describe_instances", "describe_volumes", "list_endpoints", "describe_images", "describe_snapshots",
            "list_objects_v2", "describe_parameters", "describe_log_groups", "list_schedules", "list_image_pipelines",
            "list_images", "describe_secret", "describe_stacks"} <= asked


def test_a_check_that_cannot_run_is_not_a_proof():
    handlers = empty_account()
    handlers["logs"] = lambda op, p: Error("AccessDeniedException", "not authorized to perform: logs:DescribeLogGroups")
    rc, out, _ = run(handlers)
    assert rc == 1
    assert "could not check log groups: An error occurred (AccessDeniedException)" in out
    assert out.splitlines()[-1] == "nothing found that bills, but 1 check(s) could not run: not proven"


def test_bad_input_is_one_line(capsys):
    rc = leftovers.main(["--region", "zz-fake-9", "--cdk-json", "cdk.json"], client=lambda s, r: None, account="1",
                        price=lambda t, r: None, out=io.StringIO())
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "zz-fake-9" in err and "\n" not in err


def test_a_build_still_running_bills_and_a_tagged_log_group_is_found_by_its_name():
    handlers = empty_account()
    base_ib = handlers["imagebuilder"]

    def ib(op, p):
        if op == "list_images":
            return {"imageVersionList": [{"arn": f"{IB}:image/inference-kit-neuron-build/1.0.7", "name":
                                          "inference-kit-neuron-build"}]}
        if op == "list_image_build_versions":
            return {"imageSummaryList": [{"arn": f"{IB}:image/inference-kit-neuron-build/1.0.7/2",
                                          "name": "inference-kit-neuron-build", "version": "1.0.7/2",
                                          "state": {"status": "BUILDING"}}]}
        return base_ib(op, p)

    def tagging(op, p):
        return {"ResourceTagMappingList": [{"ResourceARN": f"arn:aws:logs:{R}:{ACCOUNT}:log-group:OddName-Flow:*",
                                            "Tags": KIT}]}

    def logs(op, p):
        if p["logGroupNamePrefix"] == "OddName-Flow":
            return {"logGroups": [{"logGroupName": "OddName-Flow", "storedBytes": 0, "retentionInDays": 7},
                                  {"logGroupName": "OddName-Flowers-not-ours", "storedBytes": 10}]}
        return {"logGroups": []}
    handlers.update(imagebuilder=ib, resourcegroupstaggingapi=tagging, logs=logs)
    rc, out, _ = run(handlers)
    assert rc == 1
    row, rm = entry(out, "ib build running", "inference-kit-neuron-build")
    assert row.lstrip().startswith("BILLS") and "?/month" in row
    assert rm == (f"remove: aws imagebuilder cancel-image-creation --image-build-version-arn "
                  f"{IB}:image/inference-kit-neuron-build/1.0.7/2 --region us-east-1")
    row, _ = entry(out, "log group", "OddName-Flow")
    assert "7 d" in row and "Flowers-not-ours" not in out
    assert out.splitlines()[-1] == "1 still bills: $0.00/month or more (some prices unknown); remove them with the " \
                                   "commands above"


EU = "eu-west-1"
ORPHAN, COPY_SNAP, COPY = "snap-0123456789abcdef0", "snap-0fedcba9876543210", "ami-0c0c0c0c0c0c0c0c0"
ORPHAN_COPY = "snap-00c0ffee00c0ffee0"
KEY_LIVE, KEY_GOING = "1234abcd-12ab-34cd-56ef-1234567890ab", "0987dcba-09fe-87dc-65ba-ab0987654321"


def shared_region_account():
    """A region only a share touched: the copy it made (the kit's tag and kit-share, harness/account/touched.py
    share_tags) and its snapshot, the snapshot of an earlier copy deregistered alone, a snapshot a
    bare deregister-image of a kit build left (Image Builder's tags), another team's Image Builder
    snapshot, and two kit keys: one found by its alias, one by its tag and pending deletion."""
    handlers = empty_account()

    def ec2(op, p):
        if op == "describe_images":
            if p["Filters"][0]["Name"] == "block-device-mapping.snapshot-id":
                assert p["Filters"][0]["Values"] == [ORPHAN_COPY, ORPHAN] and p["Owners"] == ["self"]
                return {"Images": []}  # the AMI that mapped it is gone
            return {"Images": [{"ImageId": COPY, "State": "available", "OwnerId": ACCOUNT, "Name": "inference-kit-copy",
                                "CreationDate": "2026-12-02T08:00:00.000Z",
                                "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": COPY_SNAP}}],
                                "Tags": KIT + [{"Key": "kit-image", "Value": "vllm-cuda"},
                                               {"Key": "kit-share", "Value": f"ami-0abcdef1234567890 {R}"}]}]}
        if op == "describe_snapshots":
            if "SnapshotIds" in p:
                assert p["SnapshotIds"] == [COPY_SNAP]
                return {"Snapshots": [{"SnapshotId": COPY_SNAP, "VolumeSize": 150, "State": "completed",
                                       "FullSnapshotSizeInBytes": 32 * 1024 ** 3}]}
            if p["Filters"][0]["Name"] == "tag:project":  # a share's copies tag their snapshots too
                return {"Snapshots": [{"SnapshotId": ORPHAN_COPY, "VolumeSize": 150, "State": "completed",
                                       "FullSnapshotSizeInBytes": 10 * 1024 ** 3,
                                       "Description": "Copied for DestinationAmi ami-0c1c1c1c1c1c1c1c1 from SourceAmi "
                                                      "ami-0abcdef1234567890 for SourceSnapshot snap-0aaaaaaaaaaaaaaaa. "
                                                      "Task created on 1,764,583,200,000.",
                                       "Tags": KIT + [{"Key": "kit-share", "Value": f"ami-0abcdef1234567890 {R}"}]}]}
            assert p["Filters"] == [{"Name": "tag:CreatedBy", "Values": ["EC2 Image Builder"]}]
            ib = [{"Key": "CreatedBy", "Value": "EC2 Image Builder"}]
            return {"Snapshots": [
                {"SnapshotId": ORPHAN, "VolumeSize": 150, "FullSnapshotSizeInBytes": 20 * 1024 ** 3, "State": "completed",
                 "Description": "Created by CreateImage(i-0b22a22eec53b9321) for ami-0dead0000beef0000 from vol-0f3e",
                 "Tags": ib + [{"Key": "Ec2ImageBuilderArn",
                                "Value": f"arn:aws:imagebuilder:{EU}:{ACCOUNT}:image/inference-kit-vllm-cuda-build/1.0.4660/1"}]},
                {"SnapshotId": "snap-0aaaabbbbccccdddd", "VolumeSize": 8, "State": "completed",
                 "Tags": ib + [{"Key": "Ec2ImageBuilderArn",
                                "Value": f"arn:aws:imagebuilder:{EU}:{ACCOUNT}:image/other-team-recipe/1.0.0/3"}]}]}
        return handlers["ec2"](op, p)

    def kms(op, p):
        if op == "list_aliases":
            return {"Aliases": [
                {"AliasName": "alias/inference-kit/vllm-cuda", "TargetKeyId": KEY_LIVE,
                 "AliasArn": f"arn:aws:kms:{EU}:{ACCOUNT}:alias/inference-kit/vllm-cuda"},
                {"AliasName": "alias/aws/ebs", "TargetKeyId": "0b0b0b0b-1111-2222-3333-444444444444",
                 "AliasArn": f"arn:aws:kms:{EU}:{ACCOUNT}:alias/aws/ebs"}], "Truncated": False}
        assert op == "describe_key" and p["KeyId"] in (KEY_LIVE, KEY_GOING), p
        meta = {"KeyId": p["KeyId"], "Arn": f"arn:aws:kms:{EU}:{ACCOUNT}:key/{p['KeyId']}", "KeyManager": "CUSTOMER",
                "Enabled": True, "KeyState": "Enabled", "CreationDate": T}
        if p["KeyId"] == KEY_GOING:
            meta.update(Enabled=False, KeyState="PendingDeletion", PendingDeletionWindowInDays=7,
                        DeletionDate=dt.datetime(2026, 12, 8, 9, 0, tzinfo=dt.timezone.utc))
        return {"KeyMetadata": meta}

    def tagging(op, p):
        return {"ResourceTagMappingList": [{"ResourceARN": f"arn:aws:kms:{EU}:{ACCOUNT}:key/{KEY_GOING}", "Tags": KIT}]}

    return {**handlers, "ec2": ec2, "kms": kms, "resourcegroupstaggingapi": tagging}


def test_a_region_a_share_touched_is_searched_and_its_orphaned_snapshot_copy_and_keys_listed(tmp_path, monkeypatch):
    from harness.account import touched

    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path))
    touched.record_region(EU, "image copy for a share", err=io.StringIO())
    by_region = {R: {s: Replay(s, h) for s, h in empty_account().items()},
                 EU: {s: Replay(s, h, region=EU) for s, h in shared_region_account().items()}}
    out = io.StringIO()
    rc = leftovers.main(["--cdk-json", "cdk.json"], client=lambda s, r: by_region[r][s],
                        price=lambda t, r: PRICES.get(t), account=ACCOUNT, out=out)
    text = out.getvalue()
    assert rc == 1, text
    assert f"also {EU}: recorded by harness images build / share (harness/account/touched.py)" in text
    assert text.splitlines()[1:3] == ["us-east-1: 0 left", f"{EU}: 6 left"]
    row, rm = entry(text, "orphaned snapshot", ORPHAN)
    assert row.lstrip().startswith("BILLS") and "20.0 GB written; ami-0dead0000beef0000 no longer exists" in row
    assert "$1.00/month" in row  # 20 GB x $0.05
    assert rm == f"remove: aws ec2 delete-snapshot --snapshot-id {ORPHAN} --region {EU}"
    assert "snap-0aaaabbbbccccdddd" not in text  # another team's Image Builder snapshot
    row, rm = entry(text, "orphaned snapshot", ORPHAN_COPY)  # a share's copy deregistered alone
    assert "10.0 GB written; ami-0c1c1c1c1c1c1c1c1 no longer exists" in row and "$0.50/month" in row
    assert rm == f"remove: aws ec2 delete-snapshot --snapshot-id {ORPHAN_COPY} --region {EU}"
    row, rm = entry(text, "ami", COPY)
    assert f"vllm-cuda (copy of ami-0abcdef1234567890 {R} made for a share)" in row and "$0.00/month" in row
    assert rm.startswith(f"remove: aws ec2 deregister-image --image-id {COPY} --region {EU}, then its snapshots: "
                         f"aws ec2 delete-snapshot --snapshot-id {COPY_SNAP} --region {EU}")
    row, _ = entry(text, "ebs snapshot", COPY_SNAP)
    assert f"of {COPY}" in row and "$1.60/month" in row
    row, rm = entry(text, "kms key", KEY_LIVE)
    assert "(alias/inference-kit/vllm-cuda)" in row and row.lstrip().startswith("BILLS") and "$1.00/month" in row
    assert rm.startswith(f"remove: aws kms schedule-key-deletion --key-id {KEY_LIVE} --pending-window-in-days 30 "
                         f"--region {EU}")
    row, rm = entry(text, "kms key", KEY_GOING)
    assert row.lstrip().startswith("free") and "pending deletion, deleted on 2026-12-08" in row
    assert rm.startswith("remove: nothing: KMS deletes it on 2026-12-08")
    assert "0b0b0b0b" not in text  # the AWS managed key behind alias/aws/ebs is not looked at
    assert "tagged resource" not in text  # the tagged key is listed as a key, not as an unknown resource
    assert text.splitlines()[-1] == "4 still bill: $4.10/month; remove them with the commands above"
