# shellcheck shell=bash
# Engine for g6 (and any x86_64 NVIDIA type): vLLM from PyPI in its own virtualenv.
# Contract for every engine file (installed to /usr/local/lib/inference-kit/engine.sh):
#   engine_install  idempotent install of the server (runs once per provisioning)
#   engine_exec     exec the server in the foreground on 127.0.0.1:$KIT_PORT, serving
#                   $KIT_SERVED_MODEL with an OpenAI-compatible /v1/chat/completions and /health
# Variables come from /etc/inference-kit/kit.env (written by stacks/inference_instance.py).
# Catalog facts it reads (kit/catalog.py via stacks/ec2_backend.py): KIT_VLLM_ARGS, vLLM's
# tool-call flags for the model (Backend.engine_settings: vllm_tool_flags), passed through as is;
# KIT_MODEL / KIT_PORT (the model served, Backend.port); KIT_MODEL_REVISION (set when a commit is
# pinned, kit/weights.py). The pins (KIT_VLLM_VERSION...) come from
# kit/pins.py through kit/image_families.py. KIT_TENSOR_PARALLEL (set only above 1) spreads the
# model over that many GPUs: the degree the planner chose (stacks/sizing.py, kit/fit.py).

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
  # Recorded; a package built from another commit than the pinned one is refused (kit/weights.py).
  kit_record_model "$dir" "" "${KIT_MODEL_REVISION:-}" package "$dir/manifest.json" >&2 ||
    { kit_log "package $uri not served" >&2; return 1; }
  printf '%s' "$dir"
}

engine_exec() {
  export HF_HOME=/opt/inference-kit/hf VLLM_NO_USAGE_STATS=1
  local model rev how
  model=$(engine_model) || exit 1
  if [ -z "${KIT_MODEL_PARAM:-}" ]; then
    # One commit for the download, the record and vLLM's --revision/--tokenizer-revision (vLLM's
    # ModelConfig revision and tokenizer_revision: a branch, a tag or a commit id), fetched here so
    # the record's digest is of the files vLLM then loads from the cache (snapshots/<commit>).
    read -r rev how <<<"$(kit_model_revision "$KIT_VENV/bin/hf" "$model" \
      /etc/inference-kit/prepulled-revision "$(cat /etc/inference-kit/prepulled-model 2>/dev/null)")"
    [ -n "$rev" ] || exit 1
    # The image's own commit is whole in its cache: offline, so neither this download nor vLLM asks
    # the Hub (a gated model would need a token an attendee may not have). huggingface_hub's
    # HF_HUB_OFFLINE serves a commit's cached snapshot and fails if it is missing; vLLM passes it to
    # its snapshot_download (local_files_only=HF_HUB_OFFLINE, vllm-project/vllm#4374), the answer
    # given for serving a gated model without a token (vllm-project/vllm#9255).
    [ "$how" != image ] || export HF_HUB_OFFLINE=1
    "$KIT_VENV/bin/hf" download "$model" --revision "$rev" >/dev/null || exit 1
    kit_record_model "$HF_HOME/hub/models--${model//\//--}/snapshots/$rev" "$model" "$rev" "$how" || exit 1
  fi
  # shellcheck disable=SC2086  # KIT_VLLM_ARGS is a list of flags written by the stack
  exec "$KIT_VENV/bin/vllm" serve "$model" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --max-model-len "$KIT_MAX_MODEL_LEN" \
    ${rev:+--revision "$rev" --tokenizer-revision "$rev"} \
    ${KIT_TENSOR_PARALLEL:+--tensor-parallel-size "$KIT_TENSOR_PARALLEL"} \
    $KIT_VLLM_ARGS
}
