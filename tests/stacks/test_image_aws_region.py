"""The image build and test steps that read the Hugging Face token pass `aws` a region.

Image Builder's agent runs component steps with systemd's environment: no AWS_REGION, no
~/.aws/config. The GPU DLAMIs the vLLM images build on list the `awscli` 1.44.x package (AWS CLI
v1) in their release notes (e.g. Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)
20260130: "awscli 1.44.26 -> 1.44.28"). CLI v1 takes the region from the command line, the
environment or the config file only, and stops with "You must specify a region." otherwise;
falling back to the instance metadata service is a CLI v2 feature (aws/aws-cli#486, labelled v2;
aws/aws-cli#8401: "The AWS CLI v2 uses a different IMDS region fetcher than botocore"). The fake
`aws` below behaves like v1, and a fake IMDSv2 answers the region.
"""
from __future__ import annotations

import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_binary
from tests.stacks.test_images_smoke import _free_port, venv  # noqa: F401 - the fake vLLM fixture
from tests.stacks.test_neuron_install import SYSTEMD_PATH, render

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "ami" / "scripts" / "smoke-completion.sh"
VLLM_CUDA = ROOT / "ami" / "components" / "vllm-cuda.yaml"
REGION = "us-east-2"

# AWS CLI v1 without a region anywhere: botocore's NoRegionError, as the CLI prints it.
FAKE_AWS_V1 = '''#!/bin/bash
region=${AWS_REGION:-${AWS_DEFAULT_REGION:-}}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = --region ] && region=${args[i + 1]}
done
if [ -z "$region" ]; then
  echo 'You must specify a region. You can also configure your region by running "aws configure".' >&2
  exit 255
fi
echo "$region $*" >> "$FAKE_AWS_LOG"
echo hf_faketoken0000
'''


class _Imds(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        self._send(200 if ok else 400, "imdsv2-token")

    def do_GET(self):
        if self.headers.get("X-aws-ec2-metadata-token") != "imdsv2-token":
            return self._send(401, "")  # IMDSv2 only, as the build host's metadata options require
        self._send(200 if self.path == "/latest/meta-data/placement/region" else 404, REGION)


@pytest.fixture
def imds():
    server = HTTPServer(("127.0.0.1", 0), _Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def agent_bin(tmp_path) -> tuple[Path, Path]:
    """A directory standing for /usr/local/bin with the v1-like `aws`, and its call log."""
    require_binary("curl")
    bin_dir = tmp_path / "usr-local-bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(FAKE_AWS_V1)
    (bin_dir / "aws").chmod(0o755)
    return bin_dir, tmp_path / "aws.log"


def agent_env(bin_dir: Path, log: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:{SYSTEMD_PATH}", "LANG": "C.UTF-8", "FAKE_AWS_LOG": str(log), **extra}


def test_the_fake_aws_refuses_without_a_region_as_cli_v1_does(agent_bin):
    bin_dir, log = agent_bin
    r = subprocess.run(["aws", "secretsmanager", "get-secret-value", "--secret-id", "x"],
                       env=agent_env(bin_dir, log), capture_output=True, text=True)
    assert r.returncode == 255 and "You must specify a region" in r.stderr


def test_smoke_test_reads_the_token_with_the_instance_region(venv, agent_bin, imds, tmp_path):  # noqa: F811
    require_binary("jq")
    bin_dir, log = agent_bin
    (tmp_path / "state").mkdir()
    env = agent_env(bin_dir, log, HF_TOKEN_SECRET="inference-kit/hf-token", SMOKE_IMDS_URL=imds,
                    FAKE_STATE=str(tmp_path / "state"), SMOKE_PORT=str(_free_port()), SMOKE_POLL="0.2",
                    SMOKE_TIMEOUT="20", SMOKE_HF_HOME=str(tmp_path / "hf"), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run(["/bin/bash", str(SMOKE), str(venv), "google/gemma-4-E2B-it"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.read_text().split()[:2] == [REGION, "secretsmanager"]


def _prepull_script() -> str:
    doc = yaml.safe_load(VLLM_CUDA.read_text())
    (build,) = [p for p in doc["phases"] if p["name"] == "build"]
    (step,) = [s for s in build["steps"] if s["name"] == "PrePullWeights"]
    return "\n".join(step["inputs"]["commands"])


def test_vllm_cuda_prepull_reads_the_token_with_the_instance_region(agent_bin, imds, tmp_path):
    bin_dir, log = agent_bin
    root = tmp_path / "root"
    hf = root / "opt/inference-kit/vllm/bin/hf"
    hf.parent.mkdir(parents=True)
    hf.write_text('#!/bin/sh\n[ -n "$HF_TOKEN" ] || exit 3\necho "$@" > "$HF_HOME/downloaded"\n')
    hf.chmod(0o755)
    (root / "etc/inference-kit").mkdir(parents=True)
    script = render(_prepull_script(), {"PrePullModel": "google/gemma-4-E2B-it", "ModelRevision": "a" * 40,
                                        "HfTokenSecret": "inference-kit/hf-token"}, root)
    script = script.replace("http://169.254.169.254", imds)
    r = subprocess.run(["/bin/bash", "-c", script], env=agent_env(bin_dir, log), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.read_text().split()[:2] == [REGION, "secretsmanager"]
    assert (root / "opt/inference-kit/hf/downloaded").read_text().split() == ["download", "google/gemma-4-E2B-it",
                                                                             "--revision", "a" * 40]
