# shellcheck shell=bash
# Engine for g6 (and any x86_64 NVIDIA type): vLLM from PyPI in its own virtualenv.
# Contract for every engine file (installed to /usr/local/lib/inference-kit/engine.sh):
#   engine_install  idempotent install of the server (runs once per provisioning)
#   engine_exec     exec the server in the foreground on 127.0.0.1:$KIT_PORT, serving
#                   $KIT_SERVED_MODEL with an OpenAI-compatible /v1/chat/completions and /health
# Variables come from /etc/inference-kit/kit.env (written by stacks/inference_instance.py).
# Catalog facts it reads (kit/catalog.py via stacks/ec2_backend.py): KIT_VLLM_ARGS, vLLM's
# tool-call flags for the model (Backend.engine_settings: vllm_tool_flags), passed through as is;
# KIT_MODEL / KIT_PORT (the model served, Backend.port). The pins (KIT_VLLM_VERSION...) come from
# ami/pins.py through kit/image_families.py. KIT_TENSOR_PARALLEL (set only above 1) spreads the
# model over that many GPUs: the degree the planner chose (stacks/sizing.py, kit/plan.py).

KIT_VENV=/opt/inference-kit/vllm

engine_install() {
  if [ -x "$KIT_VENV/bin/vllm" ] && "$KIT_VENV/bin/python" -c 'import vllm' 2>/dev/null; then
    kit_log "vLLM already installed"
    return 0
  fi
  kit_log "installing vLLM $KIT_VLLM_VERSION (uv $KIT_UV_VERSION, Python $KIT_PYTHON_VERSION)"
  # Same layout as the image pipeline's python-uv component (ami/components/python-uv.yaml).
  export UV_PYTHON_INSTALL_DIR=/opt/inference-kit/python UV_CACHE_DIR=/opt/inference-kit/uv-cache
  [ -x /opt/inference-kit/uv/bin/uv ] || {
    python3 -m venv /opt/inference-kit/uv &&
      kit_retry 3 /opt/inference-kit/uv/bin/pip install -q "uv==$KIT_UV_VERSION"
  }
  # uv fetches a standalone CPython, so the engine does not depend on the AMI's Python.
  kit_retry 3 /opt/inference-kit/uv/bin/uv venv --seed --python "$KIT_PYTHON_VERSION" "$KIT_VENV"
  kit_retry 3 /opt/inference-kit/uv/bin/uv pip install --python "$KIT_VENV/bin/python" \
    "vllm==$KIT_VLLM_VERSION"
}

# A package (stacks/package.py): KIT_MODEL_PARAM names the SSM parameter holding the newest build's
# URI (s3://.../package/<scheme>/<build>), read at every server start, so a restart serves a newer
# build. Copied through the VPC's S3 gateway endpoint and served from disk; --delete drops files
# of an earlier build; manifest.json is uploaded last, so its presence means the copy is whole.
# KIT_PACKAGE_DIR is overridable only so tests can run this against local stand-ins.
engine_model() {
  if [ -z "${KIT_MODEL_PARAM:-}" ]; then
    printf '%s' "$KIT_MODEL"
    return 0
  fi
  local dir=${KIT_PACKAGE_DIR:-/opt/inference-kit/package} uri
  uri=$(aws ssm get-parameter --region "$KIT_REGION" --name "$KIT_MODEL_PARAM" \
    --query Parameter.Value --output text) && [ -n "$uri" ] ||
    { kit_log "cannot read $KIT_MODEL_PARAM: no package build published in $KIT_REGION?" >&2; return 1; }
  kit_log "syncing package $uri (newest in $KIT_MODEL_PARAM)" >&2
  kit_retry 3 aws s3 sync --only-show-errors --delete --region "$KIT_REGION" "$uri/" "$dir/" >&2 || return 1
  [ -s "$dir/manifest.json" ] || { kit_log "package has no manifest.json: $uri" >&2; return 1; }
  printf '%s' "$dir"
}

engine_exec() {
  export HF_HOME=/opt/inference-kit/hf VLLM_NO_USAGE_STATS=1
  local model
  model=$(engine_model) || exit 1
  # shellcheck disable=SC2086  # KIT_VLLM_ARGS is a list of flags written by the stack
  exec "$KIT_VENV/bin/vllm" serve "$model" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --max-model-len "$KIT_MAX_MODEL_LEN" \
    ${KIT_TENSOR_PARALLEL:+--tensor-parallel-size "$KIT_TENSOR_PARALLEL"} \
    $KIT_VLLM_ARGS
}
