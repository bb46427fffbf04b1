# shellcheck shell=bash
# Engine for inf2 and trn1: the kit's Neuron engine (ami/neuron) with the Neuron SDK pinned in ami/pins.py, baked
# into the neuron image by the image pipeline (stacks/images.py, docs/images.md). Contract: see
# engine-vllm-gpu.sh. Safe to run again after a reboot or a stop/start: the checkpoint is
# downloaded once and compiled graphs are reused from the persistent cache on EBS.
#
# KIT_TP_DEGREE comes from the stack: the NeuronCore count of the instance type in
# harness/catalog.py, rounded down to a degree the Neuron runtime supports on
# KIT_NEURON_PLATFORM. It is a ceiling: the degree served must also divide the model's attention
# heads (32 on trn1.32xlarge would be refused for an 8-head model), known once the checkpoint is here.

KIT_NEURON_VENV=${KIT_NEURON_VENV:-/opt/inference-kit/neuron}
KIT_NEURON_APP=${KIT_NEURON_APP:-/opt/inference-kit/app}  # holds ami/neuron (the image pipeline)
KIT_NEURON_SERVE=$KIT_NEURON_VENV/bin/kit-neuron-serve
# neuron-ls lives here, not on the PATH systemd gives the unit (aws-neuron/aws-neuron-sdk#447;
# ami/pins.py NEURON_TOOLS_BIN): called by path.
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
  # serve), once: later starts (reboot, stop/start) use the local copy without the network.
  if [ ! -e "$KIT_MODEL_DIR/.kit-complete" ]; then
    install -d -m 0755 "$KIT_MODEL_DIR"
    "$KIT_NEURON_VENV/bin/hf" download "$KIT_MODEL" --local-dir "$KIT_MODEL_DIR" >/dev/null
    touch "$KIT_MODEL_DIR/.kit-complete"
  fi
  local tp
  tp=$(kit_neuron_tp "$KIT_MODEL_DIR")
  exec "$KIT_NEURON_SERVE" --model "$KIT_MODEL_DIR" --served-model-name "$KIT_SERVED_MODEL" \
    --host 127.0.0.1 --port "$KIT_PORT" --tp-degree "$tp"
}

# kit_neuron_tp CHECKPOINT_DIR: the largest degree up to KIT_TP_DEGREE that the runtime supports
# on KIT_NEURON_PLATFORM and that divides the checkpoint's attention heads (the engine's own rule).
kit_neuron_tp() {
  PYTHONPATH=$KIT_NEURON_APP "$KIT_NEURON_VENV/bin/python" -c '
import json, sys
from ami.neuron.neuron_config import choose_tp_degree, text_config
heads = text_config(json.load(open(sys.argv[1] + "/config.json")))["num_attention_heads"]
print(choose_tp_degree(int(sys.argv[2]), sys.argv[3], heads))' "$1" "$KIT_TP_DEGREE" "$KIT_NEURON_PLATFORM"
}
