# shellcheck shell=bash
# Engine for g5g (Graviton2 + T4G, sm_75): vLLM built from source for sm_75 with the Turing
# shared-memory patch, baked into the vllm-sm75 image by the image pipelines (stacks/images.py,
# docs/images.md); the build takes hours, so nothing is compiled here. Contract: see
# engine-vllm-gpu.sh. Both functions are safe to run again after a reboot or a stop/start.
# Catalog facts it reads: KIT_VLLM_ARGS (vLLM's tool-call flags for the model,
# Backend.engine_settings), KIT_MODEL, KIT_PORT, KIT_MODEL_REVISION; see engine-vllm-gpu.sh.

KIT_VENV=/opt/inference-kit/vllm

engine_install() {
  if [ -x "$KIT_VENV/bin/vllm" ] && "$KIT_VENV/bin/python" -c 'import vllm' 2>/dev/null; then
    kit_log "vLLM (sm_75 build) found in the image: $(cat /etc/inference-kit/engine-version 2>/dev/null || echo unknown)"
    return 0
  fi
  kit_log "no sm_75 vLLM build at $KIT_VENV: build the vllm-sm75 image first (docs/images.md)"
  return 1
}

engine_exec() {
  export HF_HOME=/opt/inference-kit/hf VLLM_NO_USAGE_STATS=1
  # One commit for the download, the record and vLLM (see engine-vllm-gpu.sh).
  local rev how
  read -r rev how <<<"$(kit_model_revision "$KIT_VENV/bin/hf" "$KIT_MODEL")"
  [ -n "$rev" ] || exit 1
  "$KIT_VENV/bin/hf" download "$KIT_MODEL" --revision "$rev" >/dev/null || exit 1
  kit_record_model "$HF_HOME/hub/models--${KIT_MODEL//\//--}/snapshots/$rev" "$KIT_MODEL" "$rev" "$how" || exit 1
  # Turing: Triton attention (FlashInfer and FlashAttention need sm_80+), fp16 (no native bf16).
  # shellcheck disable=SC2086  # KIT_VLLM_ARGS is a list of flags written by the stack
  exec "$KIT_VENV/bin/vllm" serve "$KIT_MODEL" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --max-model-len "$KIT_MAX_MODEL_LEN" \
    --revision "$rev" --tokenizer-revision "$rev" \
    --attention-backend TRITON_ATTN --dtype float16 \
    $KIT_VLLM_ARGS
}
