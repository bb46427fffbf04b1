#!/bin/bash
# kit-boot: the one entry point on every EC2 backend, installed to /usr/local/bin/kit-boot.
#   kit-boot            provision (first boot, from user data): install the engine, start it as
#                       the kit-engine systemd unit, wait for /health and one chat completion,
#                       signal CloudFormation (failure carries the log tail)
#   kit-boot serve      what kit-engine.service runs: fetch the HF token, exec the engine
#   kit-boot guard      what kit-guard.timer runs every minute: TTL and idle stop
# Safe to run again: every step checks before it acts, and the signal is sent once.
# Catalog facts it reads: KIT_BACKEND (the backend id, for log lines only: nothing branches on it),
# KIT_MODEL and KIT_PORT, from kit.env (stacks/ec2_backend.py, kit/catalog.py).
# Every KIT_* variable of these scripts is declared in kit/contracts/boot_env.py (who sets it, what
# it means, which backends get it); tests/stacks/test_boot_env.py holds the scripts to it.
set -Eeuo pipefail
export HOME="${HOME:-/root}"  # cloud-init and systemd may start us without one
# Paths are overridable only so tests can run the whole flow in a scratch directory.
KIT_ENV_FILE=${KIT_ENV_FILE:-/etc/inference-kit/kit.env}
KIT_LIB_DIR=${KIT_LIB_DIR:-/usr/local/lib/inference-kit}
KIT_SYSTEMD_DIR=${KIT_SYSTEMD_DIR:-/etc/systemd/system}
# shellcheck source=/dev/null
. "$KIT_ENV_FILE"
# shellcheck source=userdata/lib.sh
. "$KIT_LIB_DIR/lib.sh"
# shellcheck source=userdata/engine-vllm-gpu.sh
. "$KIT_LIB_DIR/engine.sh"

provision() {
  install -d -m 0755 "$KIT_LOG_DIR"
  install -d -m 0700 "$KIT_STATE_DIR"
  # Everything to boot.log, written synchronously (the failure reason is read back from it);
  # fd 3 keeps cloud-init's output (console, `aws ec2 get-console-output`) for the outcome line.
  exec 3>&1 >>"$KIT_BOOT_LOG" 2>&1
  kit_log "provisioning $KIT_BACKEND: $KIT_MODEL on port $KIT_PORT"
  local deadline=$(($(date +%s) + KIT_READY_TIMEOUT_S))
  trap 'trap - ERR; failed "$(kit_failure_reason)"' ERR

  kit_ensure_tools
  engine_install

  cat >"$KIT_SYSTEMD_DIR/kit-engine.service" <<UNIT
[Unit]
Description=Inference kit model server ($KIT_BACKEND)
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/local/bin/kit-boot serve
Restart=on-failure
RestartSec=15
LimitNOFILE=65536
StandardOutput=append:$KIT_ENGINE_LOG
StandardError=append:$KIT_ENGINE_LOG

[Install]
WantedBy=multi-user.target
UNIT
  cat >"$KIT_SYSTEMD_DIR/kit-guard.service" <<UNIT
[Unit]
Description=Inference kit guardrails (TTL and idle stop)

[Service]
Type=oneshot
ExecStart=/usr/local/bin/kit-boot guard
StandardOutput=append:$KIT_LOG_DIR/guard.log
StandardError=append:$KIT_LOG_DIR/guard.log
UNIT
  cat >"$KIT_SYSTEMD_DIR/kit-guard.timer" <<UNIT
[Unit]
Description=Inference kit guardrails every minute

[Timer]
OnBootSec=2min
OnUnitActiveSec=1min

[Install]
WantedBy=timers.target
UNIT
  systemctl daemon-reload
  systemctl enable --now kit-guard.timer
  systemctl enable kit-engine.service
  systemctl restart kit-engine.service

  if kit_wait_ready "$deadline"; then
    touch "$KIT_STATE_DIR/ready"
    kit_log "ready: /health and one chat completion answered" | tee /dev/fd/3
    kit_signal 0 "model answered a chat completion"
  else
    trap - ERR
    failed "$(kit_failure_reason)"
    return 1
  fi
}

failed() {  # signal failure once, with the reason, and say it on the console too
  kit_log "FAILED: $1" >&3 || true
  kit_signal 1 "$1" || true
}

serve() {
  local token
  token=$(kit_hf_token)
  if [ -n "$token" ]; then
    export HF_TOKEN="$token"
  else
    kit_log "secret $KIT_HF_SECRET unreadable or empty: continuing without a Hugging Face token"
  fi
  unset token
  engine_exec
}

case "${1:-provision}" in
  provision) provision ;;
  serve) serve ;;
  guard) kit_guard ;;
  *) echo "usage: kit-boot [provision|serve|guard]" >&2; exit 2 ;;
esac
