"""The SageMaker vLLM container's registry per region and the published tags (kit/dlc.py), tested
against what aws/deep-learning-containers publishes, as recorded in tests/kit/data/ (each file's
``_source`` names the repository files and commits read)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kit import dlc
from kit.config import DEFAULTS, ConfigError, parse

DATA = Path(__file__).parent / "data"
REGIONS = json.loads((DATA / "dlc_region_availability.json").read_text())
PUBLISHED = json.loads((DATA / "dlc_vllm_sagemaker_published.json").read_text())


def test_the_registry_table_is_the_published_table():
    recorded = {r["region"]: r["account"] for r in REGIONS["rows"]}
    assert len(recorded) == len(REGIONS["rows"])  # no region twice in the source
    assert dlc.DLC_ACCOUNTS == recorded


@pytest.mark.parametrize("region, account", [
    ("ap-southeast-5", "550225433462"), ("ap-southeast-6", "633930458069"), ("ap-southeast-7", "590183813437"),
    ("ap-east-2", "975050140332"), ("mx-central-1", "637423239942"),  # five regions the old table lacked
])
def test_regions_the_old_table_sent_to_the_default_account(region, account):
    assert dlc.image_uri(region, "t") == f"{account}.dkr.ecr.{region}.amazonaws.com/vllm:t"


def test_a_region_the_table_lacks_is_refused_in_one_line():
    with pytest.raises(dlc.DlcRegionError) as e:
        dlc.dlc_account("us-gov-west-1")
    assert "\n" not in str(e.value) and "us-gov-west-1 has no Deep Learning Containers registry" in str(e.value)
    with pytest.raises(ConfigError, match=r"^sagemaker_region='us-gov-east-1': us-gov-east-1 has no Deep"):
        parse({"backends": "sagemaker", "sagemaker_region": "us-gov-east-1"})
    with pytest.raises(ConfigError, match=r"^region='us-gov-west-1'"):
        parse({"backends": "sagemaker", "region": "us-gov-west-1"})
    parse({"backends": "g6", "region": "us-gov-west-1"})  # only SageMaker pulls the DLC image


def test_the_published_tags_are_the_recorded_files_first_tags():
    rows = PUBLISHED["published"]
    assert [(r["version"], r["cuda"], r["os"]) for r in rows] == list(dlc.PUBLISHED_SAGEMAKER)
    assert [r["tags_0"] for r in rows] == list(dlc.PUBLISHED_SAGEMAKER_TAGS)
    for r in rows:  # the file is named after the version it holds
        assert r["path"] == f"docs/src/data/vllm/{r['version']}-gpu-sagemaker.yml"
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"])


def test_the_tag_format_changed_to_ubuntu24_04_at_0_28():
    # The published files up to 0.27.1 say ubuntu22.04; 0.28.0 and later say ubuntu24.04.
    oses = {v: o for v, _, o in dlc.PUBLISHED_SAGEMAKER}
    assert oses["0.27.1"] == "ubuntu22.04" and oses["0.28.0"] == oses["0.31.0"] == "ubuntu24.04"


def test_the_default_tag_is_a_published_one():
    tag = DEFAULTS["sagemaker_vllm_tag"]
    assert tag in dlc.PUBLISHED_SAGEMAKER_TAGS
    # the CUDA 13 images need the inference AMI the endpoint config names (kit.config DEFAULTS)
    (cuda,) = [c for v, c, _ in dlc.PUBLISHED_SAGEMAKER if v == dlc.vllm_version(tag)]
    assert cuda == "cu130" and DEFAULTS["sagemaker_ami_version"].endswith("gpu-4-1")


def test_candidates_are_the_cuda_13_tags_newest_first():
    versions = [dlc.vllm_version(t) for t in dlc.CANDIDATE_TAGS]
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    assert versions[0] == "0.31.0" and versions[-1] == "0.20.0" and all("cu130" in t for t in dlc.CANDIDATE_TAGS)
    assert len(dlc.CANDIDATE_TAGS) <= 100  # one BatchGetImage asks for all of them
