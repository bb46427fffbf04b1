#!/usr/bin/env bash
# Image test for the Neuron engine: start the image's launcher on 127.0.0.1 over a checkpoint
# directory baked into the image, wait for /health, ask for one chat completion, then greedy-decode
# a counting prompt of over 600 tokens (smoke-lib.sh smoke_long_prompt), stop the server. Exit 0
# only if the answer has text and the long prompt is continued with the right numbers: proof on
# the hardware that decoding past the 512-token sliding window serves the right tokens. The
# Neuron sibling of smoke-completion.sh (vLLM).
#
#   neuron-smoke-completion.sh LAUNCHER MODEL_DIR SERVED_NAME [extra launcher args...]
#
# A failure ends with one line naming the stage that failed, last on stderr: "load" (the engine
# died or was not healthy in time, or did not reuse the image's graphs), "answer" (no text) or
# "long prompt" (the only line on stderr: the numbers expected and those that came back, or the
# prompt's token count if not over 600).
#
# SMOKE_REQUIRE_CACHED=1: fail unless the engine reused compiled graphs (its log says "reusing
# compiled model"), i.e. the image's graphs match what a boot asks for.
# SMOKE_TIMEOUT: seconds to wait for /health (default 1800: loading, or compiling if the
# image's graphs do not match). SMOKE_PORT, SMOKE_POLL: loopback port (default 18000) and seconds
# between health checks (5). Tools by path or from systemd's default PATH only (curl, jq).
set -euo pipefail
# The shared health wait and completion (smoke-lib.sh, shellchecked on its own), from this
# script's folder: the image unpacks all of ami/scripts into one.
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/smoke-lib.sh"

launcher=${1:?usage: neuron-smoke-completion.sh LAUNCHER MODEL_DIR SERVED_NAME [args...]}
model_dir=${2:?usage: neuron-smoke-completion.sh LAUNCHER MODEL_DIR SERVED_NAME [args...]}
served=${3:?usage: neuron-smoke-completion.sh LAUNCHER MODEL_DIR SERVED_NAME [args...]}
shift 3
port=${SMOKE_PORT:-18000}
poll=${SMOKE_POLL:-5}
timeout=${SMOKE_TIMEOUT:-1800}
log=$(mktemp /tmp/smoke-neuron.XXXXXX.log)

"$launcher" --model "$model_dir" --served-model-name "$served" --host 127.0.0.1 --port "$port" "$@" \
  >"$log" 2>&1 &
server=$!
stage=load
why=
cleanup() {
  local rc=$?
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  if [ "$rc" != 0 ] && [ -n "$why" ]; then
    echo "neuron image test failed at $stage: $served from $model_dir: $why" >&2
  elif [ "$rc" != 0 ]; then
    echo "neuron image test failed at $stage: $served from $model_dir (exit $rc; the lines above say why)" >&2
  fi
}
trap cleanup EXIT

smoke_wait_healthy "the Neuron engine" "$port" "$server" "$log" "$timeout" "$poll"
if [ "${SMOKE_REQUIRE_CACHED:-0}" = 1 ] && ! grep -q "reusing compiled model" "$log"; then
  echo "the engine did not reuse the image's compiled graphs (they do not match this configuration):" >&2
  tail -n 40 "$log" >&2
  exit 1
fi

stage=answer
text=$(smoke_completion_text "$port" "$served" "$log")
echo "neuron smoke completion ok: $text"

stage="long prompt"
if ! long=$(smoke_long_prompt "$port" "$served"); then
  why=$long
  exit 1
fi
echo "neuron smoke $long"
