#!/usr/bin/env bash
# Image test: start the image's vLLM on 127.0.0.1, wait for /health, ask for one chat
# completion, stop the server. Exit 0 only if the answer has text.
#
#   smoke-completion.sh VENV MODEL [extra `vllm serve` args...]
#
# HF_TOKEN_SECRET (optional): Secrets Manager secret name holding a Hugging Face token, for
# gated models. The token goes to vLLM through the environment only; it is never printed.
# SMOKE_TIMEOUT: seconds to wait for /health (default 1800: download plus Triton compile).
# SMOKE_HF_HOME: Hugging Face cache to use and keep (default: a temporary one, removed after).
# SMOKE_PORT, SMOKE_POLL: loopback port (default 18000) and seconds between health checks (5).
# SMOKE_IMDS_URL: instance metadata service (default http://169.254.169.254; tests override it).
set -euo pipefail
# The shared health wait and completion (smoke-lib.sh, shellchecked on its own), from this
# script's folder: the image unpacks all of ami/scripts into one.
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/smoke-lib.sh"

venv=${1:?usage: smoke-completion.sh VENV MODEL [vllm serve args...]}
model=${2:?usage: smoke-completion.sh VENV MODEL [vllm serve args...]}
shift 2
port=${SMOKE_PORT:-18000}
poll=${SMOKE_POLL:-5}
timeout=${SMOKE_TIMEOUT:-1800}
log=$(mktemp /tmp/smoke-vllm.XXXXXX.log)

if [ -n "${HF_TOKEN_SECRET:-}" ]; then
  # Image Builder's agent names no region, and the DLAMI's `aws` may be AWS CLI v1 (awscli
  # 1.44.x in its release notes), which never asks IMDS for one (only v2 does, aws/aws-cli#486):
  # the environment's region, else the instance's from IMDSv2 (the build host requires v2).
  region=${AWS_REGION:-${AWS_DEFAULT_REGION:-}}
  if [ -z "$region" ]; then
    imds_url=${SMOKE_IMDS_URL:-http://169.254.169.254}
    imds=$(curl -sSf -m 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "$imds_url/latest/api/token")
    region=$(curl -sSf -m 5 -H "X-aws-ec2-metadata-token: $imds" "$imds_url/latest/meta-data/placement/region")
  fi
  token=$(aws secretsmanager get-secret-value --region "$region" --secret-id "$HF_TOKEN_SECRET" \
    --query SecretString --output text)
  export HF_TOKEN="$token"
fi
export HF_HOME=${SMOKE_HF_HOME:-/tmp/smoke-hf}

"$venv/bin/vllm" serve "$model" --host 127.0.0.1 --port "$port" "$@" >"$log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  if [ -z "${SMOKE_HF_HOME:-}" ]; then rm -rf /tmp/smoke-hf; fi
}
trap cleanup EXIT

smoke_wait_healthy vLLM "$port" "$server" "$log" "$timeout" "$poll"
text=$(smoke_completion_text "$port" "$model" "$log")
echo "smoke completion ok: $text"
