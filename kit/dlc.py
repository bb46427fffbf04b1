"""Where the SageMaker vLLM container image lives, per region (no aws-cdk-lib: harness.preflight
checks the tag exists before a deploy, stacks/sagemaker.py builds the model from it)."""
from __future__ import annotations

DLC_ACCOUNT = "763104351884"
# Regions whose Deep Learning Containers live in another registry account (opt-in regions,
# China, GovCloud); from the SageMaker Python SDK's image_uri_config for the LLM DLCs.
DLC_ACCOUNT_BY_REGION = {
    "af-south-1": "626614931356", "ap-east-1": "871362719292", "ap-northeast-3": "364406365360",
    "ap-south-2": "772153158452", "ap-southeast-3": "907027046896", "ap-southeast-4": "457447274322",
    "ca-west-1": "204538143572", "cn-north-1": "727897471807", "cn-northwest-1": "727897471807",
    "eu-central-2": "380420809688", "eu-south-1": "692866216735", "eu-south-2": "503227376785",
    "il-central-1": "780543022126", "me-central-1": "914824155844", "me-south-1": "217643126080",
    "us-gov-east-1": "446045086412", "us-gov-west-1": "442386744353",
}
VLLM_REPOSITORY = "vllm"


def dlc_account(region: str) -> str:
    return DLC_ACCOUNT_BY_REGION.get(region, DLC_ACCOUNT)


def image_uri(region: str, tag: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{dlc_account(region)}.dkr.ecr.{region}.{suffix}/{VLLM_REPOSITORY}:{tag}"
