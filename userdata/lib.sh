# shellcheck shell=bash
# Functions shared by every EC2 backend (g6, g5g, inf2, trn1). Installed to
# /usr/local/lib/inference-kit/lib.sh and sourced by kit-boot after /etc/inference-kit/kit.env.
# Never turn on xtrace here: kit_hf_token's output is a secret.
# Catalog facts it reads (kit/catalog.py, written to kit.env by stacks/ec2_backend.py):
# KIT_PORT (Backend.port) and KIT_SERVED_MODEL (the configured model, else the catalog default).

# Overridable only so tests can run these functions against local stand-ins.
KIT_LOG_DIR=${KIT_LOG_DIR:-/var/log/inference-kit}
KIT_STATE_DIR=${KIT_STATE_DIR:-/var/lib/inference-kit}
KIT_IMDS_URL=${KIT_IMDS_URL:-http://169.254.169.254}
KIT_SIGNAL_RETRIES=${KIT_SIGNAL_RETRIES:-5}
KIT_RETRY_DELAY_S=${KIT_RETRY_DELAY_S:-15}
KIT_ENGINE_LOG="$KIT_LOG_DIR/engine.log"
KIT_BOOT_LOG="$KIT_LOG_DIR/boot.log"
KIT_SERVED_RECORD=${KIT_SERVED_RECORD:-/etc/inference-kit/served-model.json}

kit_log() { printf '%s kit: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }

# Instance metadata through IMDSv2 (the only version the instance allows).
kit_imds() {
  local token
  token=$(curl -sf -m 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' \
    "$KIT_IMDS_URL/latest/api/token") || return 1
  curl -sf -m 5 -H "X-aws-ec2-metadata-token: $token" "$KIT_IMDS_URL/latest/$1"
}

kit_retry() {  # kit_retry N cmd... : run cmd up to N times, KIT_RETRY_DELAY_S (15) s apart
  local n=$1 i
  shift
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    kit_log "attempt $i/$n failed: $1"
    if [ "$i" -lt "$n" ]; then sleep "$KIT_RETRY_DELAY_S"; fi
  done
  return 1
}

# apt-get on a fresh boot, where apt-daily/unattended-upgrades may hold apt's locks for minutes.
# DPkg::Lock::Timeout (apt >= 1.9.11, Debian/apt 93e156579) makes apt wait for dpkg's frontend
# and admin locks only (apt-pkg/deb/debsystem.cc, GetLockMaybeWait); the lists lock of
# `apt-get update` and the archives lock are taken once, non-blocking (apt-pkg/acquire.cc
# pkgAcquire::GetLock -> apt-pkg/contrib/fileutl.cc GetLock: fcntl F_SETLK), and fail with
# "Could not get lock ... held by process N (unattended-upgr)". So wait for each lock with the
# same kind of lock first (POSIX record lock: Python's fcntl.lockf; a lock file this user cannot
# write is not waited for), then run apt-get with the
# timeout; a lock taken again in between fails apt-get at once, hence three attempts.
# The image components (ami/components/*.yaml) carry this function verbatim (their steps cannot
# source this file); tests/stacks/test_apt_locks.py checks the copies and runs each under a held lock.
kit_apt_get() {  # apt-get that first waits (KIT_APT_WAIT_S, 600 s) for the locks apt-daily/unattended-upgrades hold
  local attempt lock waited
  for attempt in 1 2 3; do
    for lock in ${KIT_APT_LOCKS:-/var/lib/apt/lists/lock /var/cache/apt/archives/lock /var/lib/dpkg/lock-frontend}; do
      waited=0
      while [ -e "$lock" ] && [ "$waited" -lt "${KIT_APT_WAIT_S:-600}" ] &&
        ! python3 -c 'import fcntl, os, sys; w = os.access(sys.argv[1], os.W_OK) or sys.exit(0); fcntl.lockf(os.open(sys.argv[1], os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)' "$lock" 2>/dev/null; do
        echo "kit_apt_get: waiting for $lock (${waited}s)" >&2
        sleep "${KIT_APT_POLL_S:-5}"
        waited=$((waited + ${KIT_APT_POLL_S:-5}))
      done
    done
    apt-get -o DPkg::Lock::Timeout="${KIT_APT_WAIT_S:-600}" "$@" && return 0
    echo "kit_apt_get: attempt $attempt/3 failed: apt-get $*" >&2
  done
  return 1
}

kit_ensure_tools() {
  local missing=()
  command -v curl >/dev/null || missing+=(curl)
  command -v unzip >/dev/null || missing+=(unzip)
  python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
  # The harness logs in with a key pushed by ec2-instance-connect send-ssh-public-key.
  [ -e /usr/share/ec2-instance-connect/eic_run_authorized_keys ] || missing+=(ec2-instance-connect)
  if ((${#missing[@]})); then
    kit_apt_get update -q
    DEBIAN_FRONTEND=noninteractive kit_apt_get install -y -q "${missing[@]}"
  fi
  if ! command -v aws >/dev/null; then
    kit_log "installing AWS CLI v2"
    kit_retry 5 curl -sSfL -o /tmp/awscliv2.zip "https://awscli.amazonaws.com/awscli-exe-linux-$(uname -m).zip"
    (cd /tmp && unzip -q -o awscliv2.zip && ./aws/install --update)
  fi
}

# Prints the Hugging Face token on stdout and nothing else; empty if the secret is unreadable.
kit_hf_token() {
  aws secretsmanager get-secret-value --region "$KIT_REGION" --secret-id "$KIT_HF_SECRET" \
    --query SecretString --output text 2>/dev/null || true
}

# The commit of Hugging Face model $2 to serve, and how it was chosen (kit/weights.py HOW), with the
# hf CLI $1: KIT_MODEL_REVISION when pinned; else the one this instance served before (a restart
# never moves to a newer commit); else the image's ($3 names a file holding it, for model $4); else
# main's commit now: the cache's refs/main after a one-file download (huggingface_hub docs,
# guides/manage-cache.md, "Refs"; the cache is $HF_HOME/hub, its folder models--<org>--<name>).
kit_model_revision() {  # kit_model_revision HF MODEL [BAKED_REVISION_FILE BAKED_MODEL] -> "COMMIT HOW"
  local m r h
  if [ -n "${KIT_MODEL_REVISION:-}" ]; then echo "$KIT_MODEL_REVISION pinned"; return 0; fi
  read -r m r h 2>/dev/null <"$KIT_STATE_DIR/model-revision" || true
  if [ "${m:-}" = "$2" ] && [ -n "${r:-}" ]; then echo "$r ${h:-resolved}"; return 0; fi
  if [ -n "${3:-}" ] && [ -s "$3" ] && [ "${4:-}" = "$2" ]; then echo "$(cat "$3") image"; return 0; fi
  "$1" download "$2" config.json >/dev/null || return 1
  echo "$(cat "$HF_HOME/hub/models--${2//\//--}/refs/main") resolved"
}

# What this instance serves, for the harness (harness/run/weights.py reads KIT_SERVED_RECORD over the
# tunnel's SSH connection): model, commit, how it was chosen, and the sha256 of the lines
# "<sha256>  <name>" of the config and tokenizer files in DIR (kit/weights.py file_digest, the same
# list); for a package (HOW package, COMMIT the pin or empty), its manifest's source id and commit
# (refused when not the pin) and the manifest's own sha256. Compact: user data holds 16 KB.
kit_record_model() {  # kit_record_model DIR MODEL COMMIT HOW [MANIFEST]
  python3 - "$@" >"$KIT_SERVED_RECORD.tmp" <<'PY' || return 1
import hashlib,json,os,sys
d,m,r,w,f=(sys.argv[1:]+[""])[:5]
H=lambda p:hashlib.sha256(open(p,"rb").read()).hexdigest()
N=[n for n in "config.json generation_config.json tokenizer.json tokenizer_config.json tokenizer.model special_tokens_map.json chat_template.jinja chat_template.json".split() if os.path.isfile(d+"/"+n)]
s=json.load(open(f))["source"] if f else {}
if f and r and s["revision"]!=r:sys.exit("package built from commit %s, not the pinned %s: build it again"%(s["revision"],r))
D="".join("%s  %s\n"%(H(d+"/"+n),n) for n in N)
print(json.dumps({"model":s.get("id",m),"revision":s.get("revision",r),"how":w,"files":N,
"digest":hashlib.sha256(D.encode()).hexdigest() if N else None,"package_manifest":H(f) if f else None}))
PY
  chmod 0644 "$KIT_SERVED_RECORD.tmp" && mv -f "$KIT_SERVED_RECORD.tmp" "$KIT_SERVED_RECORD"
  [ "$4" = package ] || echo "$2 $3 $4" >"$KIT_STATE_DIR/model-revision"
  kit_log "serving $(cat "$KIT_SERVED_RECORD")"
}

# One line from the end of the logs, with anything shaped like a token removed.
kit_failure_reason() {
  { tail -n 12 "$KIT_BOOT_LOG" 2>/dev/null; tail -n 20 "$KIT_ENGINE_LOG" 2>/dev/null; } |
    sed -E 's/hf_[A-Za-z0-9]{8,}/hf_***/g' | tr -s '\n\t' '  ' | tail -c 900 || true
}

# Signal CloudFormation once, on two channels (stacks/inference_instance.py says why both):
# 1. the wait condition: a PUT of {Status, Reason, UniqueId, Data} to its presigned handle URL
#    (the documented wait-condition signal), sent with an empty Content-Type. CloudFormation
#    shows the whole reason of a failure in the stack events.
# 2. the instance's own CreationPolicy: SignalResource on KIT_SIGNAL_RESOURCE (this instance's
#    logical id). A creation policy is invoked whenever CloudFormation creates the instance, a
#    replacement included, so a new instance is always waited for. SignalResource has no reason
#    field; its UniqueId (1-64 characters, botocore's ResourceSignalUniqueId) carries the
#    instance id and, on failure, the end of the reason.
kit_signal() {  # kit_signal 0|1 [reason]
  local code=$1 reason=${2:-ready} iid body
  [ -e "$KIT_STATE_DIR/signalled" ] && return 0
  iid=$(kit_imds meta-data/instance-id) || iid=$(hostname)
  if [ ! -e "$KIT_STATE_DIR/signalled-handle" ]; then
    body=$(python3 -c 'import json, sys
print(json.dumps({"Status": "SUCCESS" if sys.argv[1] == "0" else "FAILURE",
                  "Reason": sys.argv[2][:900], "UniqueId": sys.argv[3], "Data": sys.argv[2][:900]}))' \
      "$code" "$reason" "$iid") || return 1
    if curl -sf -m 30 --retry "$KIT_SIGNAL_RETRIES" --retry-all-errors -X PUT -H 'Content-Type:' --data-binary "$body" \
      "$KIT_SIGNAL_URL" >/dev/null; then
      touch "$KIT_STATE_DIR/signalled-handle"
    else
      [ -n "${KIT_SIGNAL_RESOURCE:-}" ] || return 1
    fi
  fi
  kit_signal_resource "$code" "$iid" "$reason" || return 1
  touch "$KIT_STATE_DIR/signalled"
}

# The UniqueId of the resource signal: the instance id, and on failure the reason's last words
# (the end of the log tail is where the error is), 64 characters at most.
kit_signal_unique_id() {  # kit_signal_unique_id 0|1 IID REASON
  local id=$2
  [ "$1" = 0 ] && { printf '%s' "$id"; return 0; }
  local tail=$(( 64 - ${#id} - 2 ))
  printf '%s: %s' "$id" "$(printf '%s' "$3" | tr -s '[:space:]' ' ' | tail -c "$tail")"
}

kit_signal_resource() {  # kit_signal_resource 0|1 IID REASON
  [ -n "${KIT_SIGNAL_RESOURCE:-}" ] || return 0
  local status=SUCCESS
  [ "$1" = 0 ] || status=FAILURE
  kit_retry "$KIT_SIGNAL_RETRIES" aws cloudformation signal-resource --region "$KIT_REGION" \
    --stack-name "$KIT_STACK" --logical-resource-id "$KIT_SIGNAL_RESOURCE" \
    --unique-id "$(kit_signal_unique_id "$1" "$2" "$3")" --status "$status" >/dev/null
}

# The model answers one real chat completion (not just /health): the reply must carry text,
# reasoning or a tool call; an empty message (a broken chat template, say) is not an answer.
kit_chat_ok() {
  local body
  body=$(printf '{"model":"%s","messages":[{"role":"user","content":"Reply with the word ready."}],"max_tokens":16}' \
    "$KIT_SERVED_MODEL")
  curl -sf -m 120 -H 'Content-Type: application/json' -d "$body" \
    "http://127.0.0.1:$KIT_PORT/v1/chat/completions" |
    python3 -c 'import json,sys; m=json.load(sys.stdin)["choices"][0]["message"] or {}
sys.exit(0 if any(str(m.get(k) or "").strip() for k in ("content", "reasoning_content", "reasoning", "tool_calls")) else 1)'
}

kit_wait_ready() {  # kit_wait_ready DEADLINE_EPOCH
  local deadline=$1 restarts
  while [ "$(date +%s)" -lt "$deadline" ]; do
    restarts=$(systemctl show -p NRestarts --value kit-engine 2>/dev/null || echo 0)
    if [ "${restarts:-0}" -ge 3 ]; then
      kit_log "engine restarted $restarts times; giving up"
      return 1
    fi
    if curl -sf -m 5 "http://127.0.0.1:$KIT_PORT${KIT_HEALTH_PATH:-/health}" >/dev/null && kit_chat_ok; then
      return 0
    fi
    sleep 10
  done
  kit_log "not ready before the deadline"
  return 1
}

# Requests served so far plus those in flight, from the engine's Prometheus metrics
# (vLLM names; the Neuron engine exports the same two). Empty if /metrics is absent.
kit_activity_counter() {
  curl -sf -m 5 "http://127.0.0.1:$KIT_PORT/metrics" 2>/dev/null |
    awk '/^[a-z_:]*(request_success_total|num_requests_running|num_requests_waiting)[{ ]/ {s += $NF}
         END {if (NR) printf "%d\n", s}'
}

# Run every minute by kit-guard.timer: hard TTL first, then idle stop.
# shutdown halts the OS; InstanceInitiatedShutdownBehavior=stop turns that into a stop.
kit_guard() {
  local now ttl idle boot counter conns last_boot last_counter last_active
  now=$(date +%s)
  ttl=$(kit_imds meta-data/tags/instance/kit-ttl-expires-epoch 2>/dev/null || true)
  if [[ "$ttl" =~ ^[0-9]+$ ]] && [ "$now" -ge "$ttl" ]; then
    kit_log "TTL reached ($(date -u -d "@$ttl" +%FT%TZ)); stopping"
    shutdown -h now
    return 0
  fi
  # Idle minutes from the instance tag (changed by a redeploy without replacing the instance).
  idle=$(kit_imds meta-data/tags/instance/kit-idle-stop-minutes 2>/dev/null || true)
  [[ "$idle" =~ ^[0-9]+$ ]] || idle=${KIT_IDLE_MINUTES:-0}
  [ "$idle" -gt 0 ] || return 0
  [ -e "$KIT_STATE_DIR/ready" ] || return 0  # never count provisioning as idle time
  boot=$(cat /proc/sys/kernel/random/boot_id)
  counter=$(kit_activity_counter || true)
  conns=$(ss -Htn state established "( sport = :$KIT_PORT )" 2>/dev/null | wc -l)
  read -r last_boot last_counter last_active 2>/dev/null <"$KIT_STATE_DIR/idle" || true
  if [ "$boot" != "${last_boot:-}" ] || [ "$counter" != "${last_counter:-}" ] || [ "$conns" -gt 0 ]; then
    last_active=$now
  fi
  echo "$boot $counter $last_active" >"$KIT_STATE_DIR/idle"
  if [ $((now - last_active)) -ge $((idle * 60)) ]; then
    kit_log "no requests for $idle minutes; stopping"
    shutdown -h now
  fi
}
