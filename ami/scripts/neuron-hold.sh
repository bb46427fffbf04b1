#!/usr/bin/env bash
# Neuron image build step PinNeuronRuntime (ami/components/neuron-engine.yaml runs it from the
# unpacked assets, after installing the pinned driver and runtime): hold them, and the kernel the
# driver was built for.
#   NEURON_APT="aws-neuronx-dkms=2.26.10.0* ..." KERNEL_HOLD="linux-*aws*" neuron-hold.sh [--check]
# NEURON_APT: kit/pins.py neuron_apt_specs; KERNEL_HOLD: dpkg-query patterns, kit/pins.py KERNEL_HOLD.
# --check (the validate step, CheckPins): fail in one line unless every package is installed at
# its pinned version (a glob: 2.30.51.0*) and held, and the running kernel is held.
#
# The driver (aws-neuronx-dkms) builds its module against the running kernel's headers, which the
# component installs with it, as the Neuron install script does (linux-headers-$(uname -r) before
# the driver: aws-neuron-sdk v2.28.1, src/helperscripts/n2-helper.py l.338-343).
#
# Why the kernel too: unattended-upgrades (on by default; userdata/lib.sh waits for its apt locks)
# installs kernel updates, the idle guard's stop/start boots them, and a driver that does not build
# for the new kernel leaves no NeuronCore. The Neuron install script warns "If Linux kernel is
# updated as a result of OS package update ... Neuron driver (aws-neuronx-dkms) should be
# re-installed after reboot" (aws-neuron-sdk v2.28.1, src/helperscripts/neuronsetuphelper.py
# l.730-732). Holding the kernel's meta packages keeps a new kernel from being pulled in; holding
# the installed kernel packages keeps their point releases out ("Stopping kernel updates on
# Ubuntu", utcc.utoronto.ca/~cks/space/blog/linux/UbuntuHoldingKernels).
set -euo pipefail
: "${NEURON_APT:?}" "${KERNEL_HOLD:?}"
read -r -a specs <<<"$NEURON_APT"
read -r -a patterns <<<"$KERNEL_HOLD"
kernel=$(uname -r)
if [ "${1:-}" = --check ]; then
  held=$(apt-mark showhold)
  for spec in "${specs[@]}"; do
    pkg=${spec%%=*}
    want=${spec#*=}
    have=$(dpkg-query -W -f '${Version}' "$pkg")
    # shellcheck disable=SC2254  # want is a version glob (2.30.51.0*)
    case "$have" in
      ${want}) echo "$pkg $have" ;;
      *) echo "$pkg is $have, want $want" >&2; exit 1 ;;
    esac
    grep -qx "$pkg" <<<"$held" || { echo "$pkg is not held" >&2; exit 1; }
  done
  grep -qx "linux-image-$kernel" <<<"$held" || { echo "the kernel linux-image-$kernel is not held" >&2; exit 1; }
  exit 0
fi
mapfile -t kernel_pkgs < <(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' "${patterns[@]}" \
  "linux-image-$kernel" 2>/dev/null | awk 'substr($1, 2, 1) == "i" {print $2}' | sort -u)  # installed, held or not (ii, hi)
if ! printf '%s\n' "${kernel_pkgs[@]}" | grep -qx "linux-image-$kernel"; then
  echo "neuron image build failed at PinNeuronRuntime: the running kernel's package linux-image-$kernel" \
    "is not installed, so the kernel cannot be held" >&2
  exit 1
fi
apt-mark hold "${specs[@]%%=*}" "${kernel_pkgs[@]}"
