#!/usr/bin/env bash
# Neuron image build step InstallGemma4Port (ami/components/neuron-engine.yaml runs it from the
# unpacked assets): NxD Inference's Gemma 4 E2B port from its contrib tree at the pinned commit.
#   NXDI_REPO=... NXDI_COMMIT=... NXDI_REF=... neuron-port.sh
# KIT_IMAGE_ROOT: a directory standing for / (tests); empty on the build host.
root=${KIT_IMAGE_ROOT:-}
set -euo pipefail
: "${NXDI_REPO:?}" "${NXDI_COMMIT:?}" "${NXDI_REF:?}"
# The engine loads NxDI's Gemma 4 E2B text model from its contrib tree (not in the
# wheel); /opt/ami/nxdi-gemma4/src is the engine's default --neuron-model-src.
src=$root/opt/inference-kit/src/nxdi
rm -rf "$src"
install -d -m 0755 "$src" "$root"/opt/ami/nxdi-gemma4
git -C "$src" init -q
# GitHub serves a commit by its id while some ref reaches it; the pinned one is on a
# pull request's head only (kit/pins.py), which a force-push can drop.
if ! git -C "$src" fetch -q --depth 1 "$NXDI_REPO" "$NXDI_COMMIT"; then
  echo "The Gemma 4 E2B port's commit $NXDI_COMMIT cannot be fetched from $NXDI_REPO:" \
    "it was reachable only from $NXDI_REF, which has since moved past it (force-push) or" \
    "is gone. Find the port's commit now (git ls-remote $NXDI_REPO $NXDI_REF, or the" \
    "merged commit on main), check it, set NXDI_COMMIT (and NXDI_REF) in kit/pins.py and" \
    "deploy NeuronImageStack again." >&2
  exit 1
fi
git -C "$src" checkout -q FETCH_HEAD
# The kit's patch of the port (two fixes from the Gemma 4 31B port: a linear KV cache with an
# absolute decode window, and full-head proportional RoPE; the patch's header says which commits).
# It ships in the assets beside this script; checked on CPU against transformers by make port-check.
patch_file=$(cd "$(dirname "$0")/.." && pwd)/neuron-port/gemma4-e2b-port.patch
if ! err=$(git -C "$src" apply --check "$patch_file" 2>&1); then
  echo "The kit's patch of the Gemma 4 E2B port (ami/neuron-port/gemma4-e2b-port.patch) does not apply" \
    "to $NXDI_COMMIT: ${err%%$'\n'*}. Re-make it against the pinned port and run make port-check," \
    "then deploy NeuronImageStack again." >&2
  exit 1
fi
git -C "$src" apply "$patch_file"
rm -rf "$root"/opt/ami/nxdi-gemma4/src
cp -r "$src/contrib/models/gemma-4-E2B/src" "$root"/opt/ami/nxdi-gemma4/src
echo "$NXDI_REPO $NXDI_COMMIT + $(sha256sum "$patch_file" | cut -c1-16) gemma4-e2b-port.patch" \
  > "$root"/opt/ami/nxdi-gemma4/SOURCE
rm -rf "$src"
test -f "$root"/opt/ami/nxdi-gemma4/src/modeling_gemma4_e2b.py
