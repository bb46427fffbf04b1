# shellcheck shell=bash
# Engine for inf2 and trn1: the kit's Neuron serving engine (ami/neuron), installed into the
# image by the image pipeline (stacks/images.py) together with the pinned Neuron SDK. This file
# only checks that the image carries it and starts it; booted from the plain public Neuron DLAMI
# it fails fast with a clear reason in the stack events. Contract: see engine-vllm-gpu.sh.

KIT_NEURON_SERVE=/opt/inference-kit/neuron/bin/kit-neuron-serve

engine_install() {
  if [ -x "$KIT_NEURON_SERVE" ]; then
    kit_log "Neuron engine found in the image"
    return 0
  fi
  kit_log "no Neuron engine at $KIT_NEURON_SERVE: deploy the Neuron image pipeline first (see docs/stacks.md)"
  return 1
}

engine_exec() {
  export HF_HOME=/opt/inference-kit/hf
  exec "$KIT_NEURON_SERVE" --model "$KIT_MODEL" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --max-model-len "$KIT_MAX_MODEL_LEN"
}
