"""Where the SageMaker vLLM container image lives, per region, and which tags AWS publishes (no
aws-cdk-lib: harness.account.preflight checks the tag exists before a deploy, kit.config refuses a
SageMaker region without a registry, stacks/sagemaker.py builds the model from it).

Both tables are recorded from aws/deep-learning-containers and tested against the recorded
extracts in tests/kit/data/ (tests/kit/test_dlc.py), which name the files and commits read.
"""
from __future__ import annotations

from kit.errors import KitError

VLLM_REPOSITORY = "vllm"

# The Deep Learning Containers' private ECR account per region: docs/reference/region_availability.md,
# section "Deep Learning Containers" ("Private ECR account IDs by region"), stored copy at commit
# 18d714e0 (it adds me-west-1 to the 2026-08-21 snapshot's table). A region not listed has no
# recorded registry, and a SageMaker backend there is refused (kit.config): GovCloud is not listed
# (the kit's earlier table had it from the SageMaker Python SDK's LLM image configs, a source for
# other repositories than vllm).
DLC_ACCOUNTS: dict[str, str] = {
    "us-east-2": "763104351884", "us-east-1": "763104351884", "us-west-1": "763104351884",
    "us-west-2": "763104351884", "af-south-1": "626614931356", "ap-east-1": "871362719292",
    "ap-south-2": "772153158452", "ap-southeast-3": "907027046896", "ap-southeast-5": "550225433462",
    "ap-southeast-4": "457447274322", "ap-south-1": "763104351884", "ap-southeast-6": "633930458069",
    "ap-northeast-3": "364406365360", "ap-northeast-2": "763104351884", "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884", "ap-east-2": "975050140332", "ap-southeast-7": "590183813437",
    "ap-northeast-1": "763104351884", "ca-west-1": "204538143572", "ca-central-1": "763104351884",
    "eu-central-1": "763104351884", "eu-west-1": "763104351884", "eu-west-2": "763104351884",
    "eu-south-1": "692866216735", "eu-west-3": "763104351884", "eu-south-2": "503227376785",
    "eu-north-1": "763104351884", "eu-central-2": "380420809688", "il-central-1": "780543022126",
    "mx-central-1": "637423239942", "me-south-1": "217643126080", "me-west-1": "124382933778",
    "me-central-1": "914824155844", "sa-east-1": "763104351884", "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
}
DLC_ACCOUNT = "763104351884"  # most regions' registry
DLC_ACCOUNT_BY_REGION = {r: a for r, a in DLC_ACCOUNTS.items() if a != DLC_ACCOUNT}  # the others

# Published vLLM SageMaker images: docs/src/data/vllm/<version>-gpu-sagemaker.yml, one file per
# release, whose first tag is "<version>-gpu-py312-<cuda>-<os>-sagemaker" (e.g. 0.27.1's
# "0.27.1-gpu-py312-cu130-ubuntu22.04-sagemaker"; from 0.28.0 on the os is ubuntu24.04: "os:
# ubuntu24.04", tags "0.31.0-gpu-py312-cu130-ubuntu24.04-sagemaker"). (version, cuda, os), oldest
# first: 0.13.0-0.27.1 from the snapshot at commit e0ecedea (2026-08-21), 0.28.0-0.31.0 from the
# stored copies of those files (commits in tests/kit/data/dlc_vllm_sagemaker_published.json).
SAGEMAKER_TAG_FORMAT = "{version}-gpu-py312-{cuda}-{os}-sagemaker"
PUBLISHED_SAGEMAKER: tuple[tuple[str, str, str], ...] = (
    *((v, "cu129", "ubuntu22.04") for v in ("0.13.0", "0.14.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1",
                                           "0.18.0", "0.18.1", "0.19.0", "0.19.1")),
    *((v, "cu130", "ubuntu22.04") for v in ("0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1",
                                           "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.1")),
    *((v, "cu130", "ubuntu24.04") for v in ("0.28.0", "0.29.0", "0.30.0", "0.31.0")),
)
PUBLISHED_SAGEMAKER_TAGS: tuple[str, ...] = tuple(
    SAGEMAKER_TAG_FORMAT.format(version=v, cuda=c, os=o) for v, c, o in PUBLISHED_SAGEMAKER)
# What preflight offers when the configured tag is missing in a region, newest first: the CUDA 13
# images, which the endpoint config's InferenceAmiVersion (kit.config DEFAULTS) is chosen for.
CANDIDATE_TAGS: tuple[str, ...] = tuple(reversed([t for t, (_, c, _o) in zip(PUBLISHED_SAGEMAKER_TAGS,
                                                                               PUBLISHED_SAGEMAKER) if c == "cu130"]))


class DlcRegionError(KitError, ValueError):
    """No recorded DLC registry for a region; str(e) is the one line to show."""


def dlc_account(region: str) -> str:
    try:
        return DLC_ACCOUNTS[region]
    except KeyError:
        raise DlcRegionError(f"{region} has no Deep Learning Containers registry in the kit's table (kit/dlc.py, "
                             "from aws/deep-learning-containers docs/reference/region_availability.md), so the "
                             "SageMaker vLLM image cannot be pulled there; use one of "
                             f"{', '.join(sorted(DLC_ACCOUNTS))}") from None


def image_uri(region: str, tag: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{dlc_account(region)}.dkr.ecr.{region}.{suffix}/{VLLM_REPOSITORY}:{tag}"


def vllm_version(tag: str) -> str:
    """The vLLM release a DLC tag carries: its first field ('0.31.0-gpu-...' -> '0.31.0')."""
    return tag.split("-", 1)[0]
