# shellcheck shell=bash
# Engine for g5g (Graviton2 + T4G, sm_75): vLLM built from source with the Turing
# shared-memory patch. The build takes hours, so it belongs in the image pipeline
# (stacks/images.py), not in user data: this file only checks that the image carries the build
# and starts it. Booted from the plain public DLAMI (no pipeline image yet) it fails fast with a
# clear reason in the stack events. Contract: see engine-vllm-gpu.sh.

KIT_VENV=/opt/inference-kit/vllm

engine_install() {
  if [ -x "$KIT_VENV/bin/vllm" ] && "$KIT_VENV/bin/python" -c 'import vllm' 2>/dev/null; then
    kit_log "vLLM (sm_75 build) found in the image"
    return 0
  fi
  kit_log "no sm_75 vLLM build at $KIT_VENV: deploy the g5g image pipeline first (see docs/stacks.md)"
  return 1
}

engine_exec() {
  # Turing has no FlashInfer (sm_80+): Triton attention with the shared-memory patch.
  export HF_HOME=/opt/inference-kit/hf VLLM_NO_USAGE_STATS=1 VLLM_ATTENTION_BACKEND=TRITON_ATTN
  # shellcheck disable=SC2086  # KIT_VLLM_ARGS is a list of flags written by the stack
  exec "$KIT_VENV/bin/vllm" serve "$KIT_MODEL" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --max-model-len "$KIT_MAX_MODEL_LEN" \
    $KIT_VLLM_ARGS
}
