"""PackageStack and package serving: bucket encrypted, public access blocked, TLS enforced; a
CPU-only CodeBuild build with the HF token secret publishing /inference-kit/package/<scheme>; g6
and SageMaker read only their scheme's prefix."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("aws_cdk")

from kit.config import ConfigError
from tests.stacks.conftest import synth


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("pkg-cdk"), backends="g6,sagemaker", g6_model="package",
                 sagemaker_model="package:ple4")


def _policies(kit, stack):
    return [st for _, p in kit.resources(stack, "AWS::IAM::Policy").items()
            for st in p["Properties"]["PolicyDocument"]["Statement"]]


def _ssm_parameter_ref(kit, stack, name):
    params = kit.templates[stack]["Parameters"]
    (ref,) = [k for k, v in params.items() if v.get("Default") == name]
    assert params[ref]["Type"] == "AWS::SSM::Parameter::Value<String>"  # resolved at deploy time
    return ref


def test_bucket_encrypted_private_tls_only(kit):
    _, bucket = kit.one("PackageStack", "AWS::S3::Bucket")
    props = bucket["Properties"]
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert sse["SSEAlgorithm"] == "AES256"
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    _, policy = kit.one("PackageStack", "AWS::S3::BucketPolicy")
    deny = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} and s["Action"] == "s3:*" for s in deny)
    # A failed upload's multipart parts: aborted by boto3 (the role may), else expired by the bucket.
    (rule,) = props["LifecycleConfiguration"]["Rules"]
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1} and rule["Status"] == "Enabled"
    (write,) = [st for st in _policies(kit, "PackageStack") if st.get("Sid") == "WritePackages"]
    assert "s3:AbortMultipartUpload" in write["Action"]


def test_codebuild_is_cpu_only_with_the_token_secret_and_publishes_the_uri(kit):
    _, project = kit.one("PackageStack", "AWS::CodeBuild::Project")
    env = project["Properties"]["Environment"]
    assert env["Type"] == "LINUX_CONTAINER" and env["ComputeType"] == "BUILD_GENERAL1_LARGE"
    assert "gpu" not in env["Image"].lower()
    variables = {v["Name"]: v for v in env["EnvironmentVariables"]}
    assert variables["HF_TOKEN"]["Type"] == "SECRETS_MANAGER"
    assert variables["HF_TOKEN"]["Value"] == "inference-kit/hf-token"
    phases = json.loads(project["Properties"]["Source"]["BuildSpec"])["phases"]
    assert env["Image"] == "aws/codebuild/standard:7.0" and phases["install"]["runtime-versions"] == {"python": "3.11"}
    spec = "\n".join(phases["install"]["commands"] + phases["build"]["commands"])
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.13.0" in spec  # CPU wheel
    assert "python3 -m harness.package build" in spec
    assert 'aws ssm put-parameter --name "/inference-kit/package/$SCHEME"' in spec
    assert project["Properties"]["Name"] == "inference-kit-package"
    statements = _policies(kit, "PackageStack")
    ssm_put = [s for s in statements if s.get("Action") == "ssm:PutParameter"]
    assert len(ssm_put) == 1 and "parameter/inference-kit/package/*" in json.dumps(ssm_put[0]["Resource"])


def test_g6_syncs_its_scheme_and_reads_only_that_prefix(kit):
    from tests.stacks.test_ec2_backends import kit_env, user_data as user_data_text

    ref = _ssm_parameter_ref(kit, "G6Stack", "/inference-kit/package/emb4")
    _, instance = next(iter(kit.resources("G6Stack", "AWS::EC2::Instance").items()))
    user_data = json.dumps(instance["Properties"]["UserData"])
    assert kit_env(user_data_text(instance))["KIT_MODEL_PARAM"] == "/inference-kit/package/emb4"
    assert "package:emb4" in user_data and "--tool-call-parser gemma4" in user_data
    # A new build moves the parameter's value. UserData is not create-only (registry schema), so a
    # value inside it would stop/start the instance on the next deploy without re-running the user
    # data, and the old package would be served on. The instance reads the parameter itself; the
    # deploy-time value (which fails a deploy before the first build) goes to an output only.
    assert ref not in json.dumps(instance)
    assert kit.templates["G6Stack"]["Outputs"]["PackageUri"]["Value"] == {"Ref": ref}
    (get,) = [s for s in _policies(kit, "G6Stack") if s.get("Action") == "ssm:GetParameter"]
    assert json.dumps(get["Resource"]).endswith(':parameter/inference-kit/package/emb4"]]}')
    s3 = [s for s in _policies(kit, "G6Stack") if "s3" in json.dumps(s.get("Action"))]
    text = json.dumps(s3)
    assert {tuple(s["Action"]) if isinstance(s["Action"], list) else s["Action"] for s in s3} == {
        "s3:GetObject", "s3:ListBucket"}
    assert "/package/emb4/*" in text and "package/ple4" not in text
    (listing,) = [s for s in s3 if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["package/emb4/*"]}}


def test_sagemaker_loads_uncompressed_s3_model_data_of_its_scheme(kit):
    ref = _ssm_parameter_ref(kit, "SageMakerStack", "/inference-kit/package/ple4")
    _, model = kit.one("SageMakerStack", "AWS::SageMaker::Model")
    c = model["Properties"]["PrimaryContainer"]
    src = c["ModelDataSource"]["S3DataSource"]
    assert src["S3DataType"] == "S3Prefix" and src["CompressionType"] == "None"
    assert src["S3Uri"] == {"Fn::Join": ["", [{"Ref": ref}, "/"]]}  # a prefix ends with "/"
    env = c["Environment"]
    assert env["SM_VLLM_MODEL"] == "/opt/ml/model"
    assert env["SM_VLLM_SERVED_MODEL_NAME"] == "package:ple4"
    assert env["SM_VLLM_TOOL_CALL_PARSER"] == "gemma4"
    text = json.dumps([s for s in _policies(kit, "SageMakerStack") if "s3:" in json.dumps(s.get("Action"))])
    assert "/package/ple4/*" in text and "package/emb4" not in text


def test_no_package_stack_unless_a_backend_serves_a_package(tmp_path):
    s = synth(tmp_path, backends="bedrock,sagemaker")
    assert "PackageStack" not in s.templates


@pytest.mark.parametrize("overrides, match", [
    ({"backends": "g5g", "g5g_model": "package"}, "g5g_model='package'"),
    ({"backends": "g6", "g6_model": "package:fp8"}, "unknown package scheme 'fp8'"),
])
def test_bad_package_choices_are_one_line_config_errors(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        synth(tmp_path, **overrides)


def test_templates_pass_cfn_lint(kit):
    """W3005 is CDK's own auto-delete provider (a DependsOn next to a GetAtt), not the kit's."""
    import subprocess
    import sys
    from pathlib import Path

    paths = [str(kit.outdir / f"{n}.template.json") for n in ("PackageStack", "G6Stack", "SageMakerStack")]
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    r = subprocess.run([str(cfn_lint), "--regions", "us-east-1", "--ignore-checks", "W3005", "--", *paths],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_build_source_asset_is_the_builder_alone_and_imports_on_its_own():
    """The CodeBuild source: harness/package, the scheme table it reads (kit/schemes.py), the
    command door it parses and fails through (kit/cli.py, kit/errors.py) and its pins, nothing
    else of the repository, and it
    imports without the rest of the kit (the build would otherwise fail after its install phase)."""
    import os
    import subprocess
    import sys

    from stacks.package import stage_kit_source

    stage = stage_kit_source()
    files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
    assert "requirements-package.txt" in files and "constraints.txt" in files
    assert all(f.startswith("harness/package/") or f in {"harness/__init__.py", "kit/__init__.py", "kit/schemes.py",
                                                          "kit/cli.py", "kit/errors.py",
                                                          "requirements-package.txt", "constraints.txt"}
               for f in files), files
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import harness.package.build, harness.package.remote, "
                        "harness.package.__main__ as m; m._parser()"], cwd=stage, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_readme_tear_down_names_the_parameters_the_build_leaves():
    # The build publishes with `aws ssm put-parameter` (not CloudFormation), so `cdk destroy`
    # leaves those parameters; the README's "Tear down" names them and points to docs/stacks.md's
    # Teardown, which lists them and removes them.
    from pathlib import Path

    from harness.package.remote import PARAMETER_PREFIX
    from stacks.package import _buildspec

    assert any("aws ssm put-parameter" in c for c in _buildspec()["phases"]["build"]["commands"])
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text().split("## Tear down", 1)[1].split("\n## ", 1)[0]
    assert f"`{PARAMETER_PREFIX}/*`" in readme and "docs/stacks.md#teardown" in readme
    tear_down = (root / "docs/stacks.md").read_text().split("## Teardown", 1)[1].split("\n## ", 1)[0]
    (row,) = [ln for ln in tear_down.splitlines() if ln.startswith(f"| `{PARAMETER_PREFIX}/*` parameters")]
    assert "below" in row
    assert f"for path in /imagebuilder/inference-kit/ami {PARAMETER_PREFIX}; do" in tear_down


def test_build_python_is_offered_by_the_image_and_accepted_by_the_pins():
    # The pinned runtime must be one standard:7.0 offers (recorded in stacks/package.py with its
    # source) and one every pinned package with a Requires-Python accepts (their installed metadata).
    from importlib.metadata import metadata

    from packaging.specifiers import SpecifierSet

    from stacks.package import BUILD_PYTHON, STANDARD_7_0_PYTHONS

    assert BUILD_PYTHON in STANDARD_7_0_PYTHONS
    for dist in ("torch", "transformers", "huggingface_hub", "safetensors", "boto3", "compressed-tensors"):
        spec = metadata(dist).get("Requires-Python") or ""
        assert SpecifierSet(spec).contains(f"{BUILD_PYTHON}.0"), (dist, spec)


def test_packing_the_largest_e2b_table_fits_the_build_memory():
    # Peak RSS of build._int4 on a per-layer-table-shaped tensor, measured at 1/16 and 1/8 of its
    # rows (262144 x 8960 bf16): 1.574 and 1.936 GiB -> 1.21 GiB + 1.32 x the table's bytes.
    # Add the shard being filled (at most SHARD_BYTES) and compare with the compute type's memory.
    from harness.package.build import SHARD_BYTES
    from harness.package.sizes import text_shapes
    from stacks.package import COMPUTE_MEMORY_GB  # the synthesized project is BUILD_GENERAL1_LARGE (above)

    config = json.loads((Path(__file__).parent / "fixtures" / "gemma-4-E2B-it.config.json").read_text())
    largest = max(r * c for r, c in (s for s in text_shapes(config).values() if len(s) == 2)) * 2
    assert largest == 262144 * 8960 * 2
    peak = 1.21 * 2**30 + 1.32 * largest + SHARD_BYTES
    assert peak < 0.75 * COMPUTE_MEMORY_GB * 1e9  # a quarter left for the rest


def test_userdata_is_not_create_only_so_a_value_in_it_would_not_reach_the_instance():
    # The registry fact the test above relies on (cfn-lint's schema, as test_readiness_gate reads it).
    from tests.stacks.test_readiness_gate import create_only

    assert "UserData" not in create_only("us-east-1", "AWS::EC2::Instance")


def _run_engine_model(tmp_path, published: str | None):
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    bin_dir, pkg = tmp_path / "bin", tmp_path / "package"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    # A stand-in `aws`: ssm get-parameter prints the published URI; s3 sync writes a whole package.
    (bin_dir / "aws").write_text(f"""#!/bin/bash
echo "$*" >> {calls}
case "$1 $2" in
  "ssm get-parameter") [ -n "{published or ''}" ] && echo "{published or ''}" || {{ echo ParameterNotFound >&2; exit 254; }} ;;
  "s3 sync") dest="${{@: -1}}"; mkdir -p "$dest"; echo '{{"source": {{"id": "g/q", "revision": "{"a" * 40}"}}}}' > "$dest/manifest.json" ;;
esac
""")
    (bin_dir / "aws").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KIT_MODEL_PARAM": "/inference-kit/package/emb4",
           "KIT_REGION": "eu-west-1", "KIT_MODEL": "package:emb4", "KIT_PACKAGE_DIR": str(pkg),
           "KIT_RETRY_DELAY_S": "0", "KIT_LOG_DIR": str(tmp_path), "KIT_STATE_DIR": str(tmp_path),
           "KIT_SERVED_RECORD": str(tmp_path / "served.json")}
    r = subprocess.run(["bash", "-c", f"source {root}/userdata/lib.sh; source {root}/userdata/engine-vllm-gpu.sh; "
                        "engine_model"], env=env, capture_output=True, text=True, timeout=60)
    return r, (calls.read_text().splitlines() if calls.exists() else [])


def test_g6_reads_the_newest_build_at_server_start_and_mirrors_it(tmp_path):
    r, calls = _run_engine_model(tmp_path, "s3://inference-kit-packages-1-eu-west-1/package/emb4/7")
    assert r.returncode == 0, r.stderr
    assert r.stdout == str(tmp_path / "package")  # what vllm serve is given
    assert calls[0] == ("ssm get-parameter --region eu-west-1 --name /inference-kit/package/emb4 "
                        "--query Parameter.Value --output text")
    assert calls[1] == (f"s3 sync --only-show-errors --delete --region eu-west-1 "
                        f"s3://inference-kit-packages-1-eu-west-1/package/emb4/7/ {tmp_path / 'package'}/")


def test_g6_without_a_published_build_fails_in_one_line(tmp_path):
    r, calls = _run_engine_model(tmp_path, None)
    assert r.returncode == 1 and r.stdout == ""
    assert "cannot read /inference-kit/package/emb4" in r.stderr
    assert not any(c.startswith("s3 ") for c in calls)


def test_buildspec_installs_the_pins_of_requirements_package():
    # The CPU torch wheel is installed first, from PyTorch's index, with the version
    # requirements-package.txt pins; the rest comes from that file under constraints.txt.
    import re

    from stacks.package import ASSET_INCLUDE, ROOT, _buildspec

    install = _buildspec()["phases"]["install"]["commands"]
    req = (ROOT / "requirements-package.txt").read_text()
    (torch_pin,) = re.findall(r"^torch==\S+", req, re.M)
    assert f"--index-url https://download.pytorch.org/whl/cpu {torch_pin}" in install[1]
    assert install[2] == "python3 -m pip install -q -c constraints.txt -r requirements-package.txt"
    assert {"requirements-package.txt", "constraints.txt"} <= set(ASSET_INCLUDE)
    constraints = (ROOT / "constraints.txt").read_text()
    for pin in re.findall(r"^([A-Za-z0-9_.-]+==\S+)", req, re.M):
        assert re.search(rf"^{re.escape(pin)}$", constraints, re.M | re.I), pin
