# shellcheck shell=bash
# Shared by smoke-completion.sh (vLLM) and neuron-smoke-completion.sh (Neuron engine), sourced
# from their own directory (the image unpacks all of ami/scripts into one folder), not run.
# Tools by path or from systemd's default PATH only (curl, jq).

# smoke_wait_healthy LABEL PORT PID LOG TIMEOUT POLL: poll http://127.0.0.1:PORT/health every
# POLL seconds until it answers; exit 1 with the log's tail if PID dies or TIMEOUT seconds pass.
smoke_wait_healthy() {
  local label=$1 port=$2 pid=$3 log=$4 timeout=$5 poll=$6
  local deadline=$((SECONDS + timeout))
  until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$label exited before it was healthy; last lines of its log:" >&2
      tail -n 40 "$log" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$label was not healthy after ${timeout}s; last lines of its log:" >&2
      tail -n 40 "$log" >&2
      exit 1
    fi
    sleep "$poll"
  done
}

# smoke_completion_text PORT MODEL LOG: ask for one short chat completion and print its text;
# exit 1 with the reply and the log's tail if it has none.
smoke_completion_text() {
  local port=$1 model=$2 log=$3 body reply text
  body=$(jq -n --arg m "$model" \
    '{model: $m, max_tokens: 32, temperature: 0,
      messages: [{role: "user", content: "Name the capital of France in one word."}]}')
  reply=$(curl -fsS "http://127.0.0.1:$port/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$body")
  text=$(printf '%s' "$reply" | jq -r '.choices[0].message.content // empty')
  if [ -z "$text" ]; then
    echo "completion had no text: $reply" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  printf '%s\n' "$text"
}
