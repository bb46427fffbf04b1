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

# smoke_long_prompt PORT MODEL: greedy-decode (temperature 0, 64 tokens) the counting prompt
# "1, 2, ..., 320," (shorter when the largest prompt bucket is smaller) on /v1/completions and
# check that the first 8 numbers written are the next ones (321 to 328).
# The prompt must be over 600 tokens by the engine's own count (usage.prompt_tokens; Gemma's
# tokenizer splits every digit: 852 digits, about 1,200-1,500 tokens, within the 2,048-token
# prompt bucket). The next number is given by the prompt's tail, past position 511: an engine that
# decodes from the wrong cache slots of the 512-token sliding window, or rotates far positions
# wrongly, counts on from elsewhere. No reference output needed. Prints one line and returns 0
# ("long prompt ok: ...") or 1 (what was expected and what came back, or why nothing was
# checked); it never exits, so the caller can make that line its one-line failure.
smoke_long_prompt() {
  local port=$1 model=$2 last=320 count=8 min_tokens=600 body reply tokens want got text largest
  # The prompt must fit the largest prompt bucket the engine serves (/health limits): at about
  # 4.7 tokens a number (1,492 for 320 with Gemma's digit-by-digit tokenizer), keep 64 spare.
  largest=$(curl -sS --max-time 30 "http://127.0.0.1:$port/health" 2>/dev/null |
    jq -r '.limits.max_prompt_tokens // empty' 2>/dev/null) || largest=
  if [[ "$largest" =~ ^[0-9]+$ ]]; then
    if [ $(((largest - 64) * 10 / 47)) -lt "$last" ]; then
      last=$(((largest - 64) * 10 / 47))
    fi
    if [ $((last * 47 / 10)) -le "$min_tokens" ]; then
      echo "long prompt skipped: the largest prompt bucket ($largest tokens) holds no counting prompt" \
        "past the 512-token sliding window"
      return 0
    fi
  fi
  body=$(jq -n --arg m "$model" --argjson last "$last" \
    '{model: $m, max_tokens: 64, temperature: 0,
      prompt: ([range(1; $last + 1) | tostring] | join(", ") + ",")}') || return 1
  # curl's own error (connection refused, timeout) becomes the reply shown below.
  reply=$(curl -sS --max-time 600 "http://127.0.0.1:$port/v1/completions" \
    -H 'Content-Type: application/json' -d "$body" 2>&1) || true
  tokens=$(printf '%s' "$reply" | jq -r '.usage.prompt_tokens // empty' 2>/dev/null) || tokens=
  if ! [[ "$tokens" =~ ^[0-9]+$ ]]; then
    reply=${reply//$'\n'/ }
    echo "the long prompt's /v1/completions reply has no usage.prompt_tokens: ${reply:0:300}"
    return 1
  fi
  if [ "$tokens" -le "$min_tokens" ]; then
    echo "the long prompt is only $tokens tokens (usage.prompt_tokens), not over $min_tokens:" \
      "it does not reach past the 512-token sliding window"
    return 1
  fi
  want=$(jq -rn --argjson last "$last" --argjson n "$count" \
    '[range($last + 1; $last + 1 + $n) | tostring] | join(" ")') || return 1
  got=$(printf '%s' "$reply" | jq -r --argjson n "$count" \
    '[(.choices[0].text // "") | scan("[0-9]+")][:$n] | join(" ")') || got=
  if [ "$got" != "$want" ]; then
    text=$(printf '%s' "$reply" | jq -c '(.choices[0].text // null) | if type == "string" then .[:160] else . end') ||
      text='?'
    echo "greedy continuation of the $tokens-token prompt \"1, 2, ..., $last,\" counts \"$got\"," \
      "expected \"$want\" (the engine wrote $text)"
    return 1
  fi
  echo "long prompt ok: $tokens prompt tokens, continued with $got"
}
