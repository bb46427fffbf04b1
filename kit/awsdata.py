"""What the kit knows offline about AWS names: regions, Availability Zone names, instance types,
model-id grammars. Each list comes from a package the kit already installs at run time, or is a
copy recorded with its source and checked against that source by the tests.

* Regions: botocore's ``data/partitions.json`` (every partition's ``regions``, without the
  ``*-global`` pseudo-regions). botocore is a runtime dependency (boto3 in requirements.txt).
* Availability Zone names per region: a copy of cfn-lint's ``cfnlint.helpers.AVAILABILITY_ZONES``
  (cfn-lint 1.58.0, a dev dependency the CDK app cannot import at deploy time);
  tests/stacks/test_awsdata.py compares the copy with the installed cfn-lint. A region the copy
  does not list is checked by name pattern only.
* EC2 instance types: botocore's EC2 service model, shape ``InstanceType`` (enum, every type the
  API knows, in any region). SageMaker endpoint types: the SageMaker model's
  ``ProductionVariantInstanceType`` enum. Whether a type is *offered* in a region and AZ is an
  account fact: preflight asks ``DescribeInstanceTypeOfferings``, the deploy's AZ choice too.
* Hugging Face model ids: the grammar of ``huggingface_hub.utils.validate_repo_id``
  (huggingface_hub 2.4.0, ``utils/_validators.py``), re-stated here because huggingface_hub is not
  a runtime dependency of the stacks; the tests compare both on the same ids.
* Bedrock model ids: botocore's bedrock-runtime ``ConversationalModelId`` shape pattern (what
  Converse accepts), without ARNs (the Bedrock stack builds the ARN from the id itself).
"""
from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from pathlib import Path

# cfn-lint 1.58.0, cfnlint/helpers.py AVAILABILITY_ZONES (the regions with names a-h; the isolated
# partitions' entries are kept as cfn-lint has them).
AVAILABILITY_ZONES: dict[str, tuple[str, ...]] = {
    r: tuple(f"{r}{x}" for x in letters) for r, letters in {
        "af-south-1": "abc", "ap-east-1": "abc", "ap-east-2": "abc", "ap-northeast-1": "abcd",
        "ap-northeast-2": "abcd", "ap-northeast-3": "abc", "ap-south-1": "abc", "ap-south-2": "abc",
        "ap-southeast-1": "abc", "ap-southeast-2": "abc", "ap-southeast-3": "abc", "ap-southeast-4": "abc",
        "ap-southeast-5": "abc", "ap-southeast-6": "abc", "ap-southeast-7": "abc", "ca-west-1": "abc",
        "ca-central-1": "abcd", "cn-north-1": "abc", "cn-northwest-1": "abc", "eu-central-1": "abc",
        "eu-central-2": "abc", "eu-north-1": "abc", "eu-south-1": "abc", "eu-south-2": "abc",
        "eu-west-1": "abc", "eu-west-2": "abc", "eu-west-3": "abc", "il-central-1": "abc",
        "me-south-1": "abc", "me-central-1": "abc", "mx-central-1": "abc", "sa-east-1": "abc",
        "us-east-1": "abcdef", "us-east-2": "abc", "us-gov-east-1": "abc", "us-gov-west-1": "abc",
        "us-west-1": "ac", "us-west-2": "abcd", "us-iso-east-1": "abc", "us-iso-west-1": "abc",
        "us-isob-east-1": "abc", "us-isob-west-1": "abc", "us-isof-east-1": "abc",
        "us-isof-south-1": "abc", "eu-isoe-west-1": "abc", "eusc-de-east-1": "abc",
    }.items()
}
AZ_SOURCE = "cfn-lint 1.58.0 cfnlint.helpers.AVAILABILITY_ZONES"

# huggingface_hub 2.4.0 utils/_validators.py REPO_ID_REGEX (re.VERBOSE | re.ASCII) and the rules
# validate_repo_id applies after it: at most one "/", no "--" or "..", not ending in ".git".
HF_REPO_ID = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)
HF_SOURCE = "huggingface_hub 2.4.0 validate_repo_id"


def _botocore_data() -> Path:
    import botocore

    return Path(botocore.__file__).parent / "data"


@lru_cache(maxsize=1)
def regions() -> frozenset[str]:
    """Every region botocore's partitions.json lists."""
    data = json.loads((_botocore_data() / "partitions.json").read_text())
    return frozenset(r for p in data["partitions"] for r in p.get("regions", {}) if not r.endswith("-global"))


def botocore_version() -> str:
    import botocore

    return botocore.__version__


@lru_cache(maxsize=4)
def _enum(service: str, shape: str) -> frozenset[str]:
    import botocore.session

    return frozenset(botocore.session.get_session().get_service_model(service).shape_for(shape).enum)


def ec2_instance_types() -> frozenset[str]:
    return _enum("ec2", "InstanceType")


def sagemaker_endpoint_types() -> frozenset[str]:
    return _enum("sagemaker", "ProductionVariantInstanceType")


@lru_cache(maxsize=1)
def bedrock_model_pattern() -> re.Pattern[str]:
    import botocore.session

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = model.operation_model("ConverseStream").input_shape.members["modelId"]
    return re.compile(shape.metadata["pattern"])


def _near(value: str, known: frozenset[str] | tuple[str, ...], n: int = 3) -> str:
    close = difflib.get_close_matches(value, sorted(known), n=n, cutoff=0.6)
    return f"did you mean {', '.join(close)}?" if close else ""


def region_problem(value: str) -> str | None:
    """None for a region botocore knows, else what to say after the value."""
    known = regions()
    if value in known:
        return None
    aws = sorted(r for r in known if not re.match(r"^(cn|us-gov|us-iso|eu-iso|eusc)", r))
    near = _near(value, known)
    return (f" is not a region botocore {botocore_version()} knows; " + (f"{near} " if near else "")
            + f"valid: {', '.join(aws)} (and the China, GovCloud and isolated partitions' regions)")


def az_problem(value: str, region: str, why: str = "") -> str | None:
    """None for an AZ name of ``region`` (or a region whose AZ names the table lacks: pattern
    only), else what to say after the value; ``why`` follows the region's name."""
    if not re.fullmatch(re.escape(region) + r"[a-z]", value):
        return f" is not an Availability Zone of {region}{why} (e.g. {region}a)"
    names = AVAILABILITY_ZONES.get(region)
    if names is None or value in names:
        return None
    return f" is not an Availability Zone of {region}{why}; valid: {', '.join(names)} ({AZ_SOURCE})"


def instance_type_problem(value: str, service: str) -> str | None:
    """None for a type the service's API knows (botocore's enum), else what to say after it."""
    known = sagemaker_endpoint_types() if service == "sagemaker" else ec2_instance_types()
    if value in known:
        return None
    family = value.rsplit(".", 1)[0] + "."
    same = sorted((t for t in known if t.startswith(family)), key=_size_order)
    hint = f"valid {family}* sizes: {', '.join(same)}" if same else _near(value, known) or "no such family"
    api = "a SageMaker endpoint" if service == "sagemaker" else "an EC2"
    return f" is not {api} instance type botocore {botocore_version()} knows; {hint}"


def _size_order(t: str) -> tuple[int, str]:
    size = t.rsplit(".", 1)[-1]
    m = re.match(r"(\d*)xlarge$", size)
    if m:
        return (100 + int(m.group(1) or 1), size)
    order = ["nano", "micro", "small", "medium", "large"]
    return (order.index(size) if size in order else 1000, size)  # metal and the like last


def hf_repo_id_problem(value: str) -> str | None:
    """The rules of huggingface_hub's validate_repo_id; None when ``value`` passes them."""
    if value.count("/") > 1:
        return " has more than one '/'; a Hugging Face id is NAME or NAMESPACE/NAME"
    if not HF_REPO_ID.fullmatch(value):
        return (" is not a Hugging Face model id: letters, digits, '-', '_', '.', at most 96 each "
                "side of one '/', not starting or ending with '-' or '.'")
    if "--" in value or ".." in value:
        return " is not a Hugging Face model id: '--' and '..' are not allowed"
    if value.endswith(".git"):
        return " is not a Hugging Face model id: it may not end in '.git'"
    return None


def bedrock_model_problem(value: str) -> str | None:
    """None for a model or inference-profile id Converse accepts (botocore's pattern), not an ARN."""
    if value.startswith("arn:") or not bedrock_model_pattern().fullmatch(value) or len(value) > 2048:
        return (" is not a Bedrock model or inference profile id (e.g. us.amazon.nova-micro-v1:0; "
                "letters, digits, '-', ':', '.'; not an ARN)")
    return None
