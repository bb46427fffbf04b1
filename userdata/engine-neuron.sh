# shellcheck shell=bash
# Engine for inf2 and trn1: the kit's Neuron engine (ami/neuron) with the Neuron SDK pinned in kit/pins.py, baked
# into the neuron image by the image pipeline (stacks/images.py, docs/images.md). Contract: see
# engine-vllm-gpu.sh. Safe to run again after a reboot or a stop/start: the checkpoint is
# downloaded once and compiled graphs are reused from the persistent cache on EBS.
#
# Catalog facts it reads (kit/catalog.py, decided by the stack, stacks/ec2_backend.py):
#   KIT_TP_DEGREES       tensor-parallel degrees the Neuron runtime supports on this instance type
#                        (neuron_tp_degrees), e.g. 1,2 on inf2.xlarge
#   KIT_NEURON_PLATFORM  the instance's Neuron platform (neuron_platform; trn1n runs as trn1)
# The shapes the engine compiles, the planner's (kit/fit.py neuron_compile; the Neuron image
# compiled the same, ami/scripts/neuron-precompile.sh, so this boot loads its graphs):
#   KIT_NEURON_TP_DEGREE       the degree: the largest of KIT_TP_DEGREES that fits and divides the heads
#   KIT_NEURON_BATCH_SIZE      sequences decoded together
#   KIT_MAX_MODEL_LEN          prompt + generated tokens per sequence
#   KIT_NEURON_PROMPT_BUCKETS  prompt lengths compiled (the largest is the prompt limit)
# All go to the engine as they are; it checks the degree against the checkpoint's heads and the
# NeuronCores it sees (ami/neuron/neuron_config.py).

KIT_NEURON_VENV=${KIT_NEURON_VENV:-/opt/inference-kit/neuron}
KIT_NEURON_SERVE=$KIT_NEURON_VENV/bin/kit-neuron-serve
# neuron-ls lives here, not on the PATH systemd gives the unit (aws-neuron/aws-neuron-sdk#447;
# kit/pins.py NEURON_TOOLS_BIN): called by path.
KIT_NEURON_TOOLS=${KIT_NEURON_TOOLS:-/opt/aws/neuron/bin}
KIT_MODEL_DIR=/opt/inference-kit/models/$KIT_MODEL

engine_install() {
  if [ -x "$KIT_NEURON_SERVE" ] && [ -x "$KIT_NEURON_TOOLS/neuron-ls" ]; then
    kit_log "Neuron engine found in the image: $(cat /etc/inference-kit/engine-version 2>/dev/null || echo unknown)"
    return 0
  fi
  kit_log "no Neuron engine at $KIT_NEURON_SERVE: build the neuron image first (docs/images.md)"
  return 1
}

engine_exec() {
  export HF_HOME=/opt/inference-kit/hf
  # The engine takes a checkpoint directory; fetch it here, where HF_TOKEN is set (kit-boot
  # serve), once: later starts (reboot, stop/start) use the local copy without the network. The
  # commit (kit_model_revision): the pin, else the one the image compiled in (.kit-revision,
  # ami/scripts/neuron-precompile.sh), else the newest; a pin the image lacks is downloaded.
  local rev how
  read -r rev how <<<"$(kit_model_revision "$KIT_NEURON_VENV/bin/hf" "$KIT_MODEL" \
    "$KIT_MODEL_DIR/.kit-revision" "$KIT_MODEL")"
  [ -n "$rev" ] || exit 1
  if [ ! -e "$KIT_MODEL_DIR/.kit-complete" ] || [ "$(cat "$KIT_MODEL_DIR/.kit-revision" 2>/dev/null)" != "$rev" ]; then
    rm -rf "$KIT_MODEL_DIR"
    install -d -m 0755 "$KIT_MODEL_DIR"
    "$KIT_NEURON_VENV/bin/hf" download "$KIT_MODEL" --revision "$rev" --local-dir "$KIT_MODEL_DIR" >/dev/null
    echo "$rev" >"$KIT_MODEL_DIR/.kit-revision"
    touch "$KIT_MODEL_DIR/.kit-complete"
  fi
  kit_record_model "$KIT_MODEL_DIR" "$KIT_MODEL" "$rev" "$how" || exit 1
  # The engine checks a first boot fits this window (ami/neuron/boot_budget.py).
  export KIT_READY_TIMEOUT_S
  exec "$KIT_NEURON_SERVE" --model "$KIT_MODEL_DIR" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --tp-degrees "$KIT_TP_DEGREES" --platform "$KIT_NEURON_PLATFORM" \
    --tp-degree "$KIT_NEURON_TP_DEGREE" --batch-size "$KIT_NEURON_BATCH_SIZE" \
    --max-total-tokens "$KIT_MAX_MODEL_LEN" --prompt-buckets "$KIT_NEURON_PROMPT_BUCKETS"
}
