#!/usr/bin/env bash
# Neuron image build step PrecompileModel (ami/components/neuron-engine.yaml runs it from the
# unpacked assets): download the inf2 backend's checkpoint and compile its graphs into the image.
#   MODEL=... HF_TOKEN_SECRET=... COMPILE_ARGS="--tp-degrees 1,2 --platform inf2 ..." neuron-precompile.sh
# MODEL_REVISION: the commit of MODEL to download (kit/weights.py), or none/empty for the newest; the
# commit downloaded is written beside the checkpoint (.kit-revision), where the boot reads it.
# COMPILE_ARGS: the engine's shape flags, kit/fit.py NeuronCompile.engine_args() (TP degrees and
# degree, platform, batch, total tokens, prompt buckets), the values the inf2 stack writes to
# kit.env for its boot (userdata/engine-neuron.sh passes them in the same order).
# A failure ends with one line naming the stage that failed (download or compile), last on stderr.
# KIT_IMAGE_ROOT: a directory standing for / (tests); empty on the build host.
root=${KIT_IMAGE_ROOT:-}
stage=setup
summary() {
  local rc=$?
  [ "$rc" = 0 ] || echo "neuron image build failed at $stage: ${MODEL:-?} (${COMPILE_ARGS:-?})," \
    "exit $rc; the lines above say why" >&2
}
trap summary EXIT
set -euo pipefail
: "${MODEL:?}" "${HF_TOKEN_SECRET:?}" "${COMPILE_ARGS:?}"
# The checkpoint and its compiled graphs, where a booting inf2 instance looks for
# them (userdata/engine-neuron.sh: the model dir and its .kit-complete; the
# launcher's --compiled-dir), with the arguments that boot passes: the engine then
# finds a cache marker with the same key and loads without compiling.
model="$MODEL"
if [ "$model" = "none" ]; then
  echo "no model compiled into the image: the first boot downloads and compiles"
  exit 0
fi
secret="$HF_TOKEN_SECRET"
if [ "$secret" != "none" ]; then
  if ! command -v aws >/dev/null; then
    # As the boot does (userdata/lib.sh kit_ensure_tools): AWS CLI v2, /usr/local/bin.
    curl -sSfL -o /tmp/awscliv2.zip "https://awscli.amazonaws.com/awscli-exe-linux-$(uname -m).zip"
    (cd /tmp && unzip -q -o awscliv2.zip && ./aws/install --update)
  fi
  # The agent's environment names no region: ask IMDSv2 (the build host requires v2).
  imds=$(curl -sSf -m 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' \
    http://169.254.169.254/latest/api/token)
  region=$(curl -sSf -m 5 -H "X-aws-ec2-metadata-token: $imds" \
    http://169.254.169.254/latest/meta-data/placement/region)
  token=$(aws secretsmanager get-secret-value --region "$region" --secret-id "$secret" \
    --query SecretString --output text)
  export HF_TOKEN="$token"
fi
export HF_HOME=$root/opt/inference-kit/hf
dir="$root/opt/inference-kit/models/$model"
stage=download
hf="$root"/opt/inference-kit/neuron/bin/hf
rev=${MODEL_REVISION:-none}
if [ "$rev" = none ]; then
  # The newest commit, resolved once: main's commit as the cache keeps it in refs/main after a
  # download (huggingface_hub docs, guides/manage-cache.md, "Refs"); the checkpoint is that commit.
  "$hf" download "$model" config.json >/dev/null
  rev=$(cat "$HF_HOME/hub/models--${model//\//--}/refs/main")
fi
if [ ! -e "$dir/.kit-complete" ] || [ "$(cat "$dir/.kit-revision" 2>/dev/null)" != "$rev" ]; then
  rm -rf "$dir"
  install -d -m 0755 "$dir"
  "$hf" download "$model" --revision "$rev" --local-dir "$dir" >/dev/null
  echo "$rev" >"$dir/.kit-revision"
  touch "$dir/.kit-complete"
fi
echo "kit-model-revision $model $rev"
stage=compile
read -r -a compile_args <<<"$COMPILE_ARGS"  # flags and values hold no spaces (numbers, words, N,N lists)
"$root"/opt/inference-kit/neuron/bin/kit-neuron-serve --model "$dir" --served-model-name "$model" \
  "${compile_args[@]}" --compile-only
echo "$model" > "$root"/etc/inference-kit/precompiled-model
