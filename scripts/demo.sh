#!/usr/bin/env bash
# make demo: the whole measurement flow on this machine, no AWS account, nothing billed.
#
# Starts the kit's Neuron engine with its CPU generator on a tiny random-weight Gemma 4
# (ami/neuron/tiny.py, built in memory, no download) on 127.0.0.1, runs
# `python -m harness.run --endpoint demo=URL` against it (agent trial, bench, cost, report),
# stops the engine (also on failure or Ctrl-C) and prints the report's path.
#
# AWS is kept out: harness.run runs with no credentials (so it discovers no stacks, skips the
# Bedrock scoreboard and prices from the dated snapshot). Knobs (environment): DEMO_RUNS (agent
# runs, 1), DEMO_CONCURRENCY (bench levels, 1,4), DEMO_REQUESTS (per level, 8), DEMO_RESULTS
# (results root, results), PY (python with requirements-dev.txt installed, .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root: relative paths below (PY, results) start there

PY=${PY:-.venv/bin/python}
RUNS=${DEMO_RUNS:-1}
CONCURRENCY=${DEMO_CONCURRENCY:-1,4}
REQUESTS=${DEMO_REQUESTS:-8}
RESULTS=${DEMO_RESULTS:-results}
start=$SECONDS
say() { printf 'demo %3ds: %s\n' "$((SECONDS - start))" "$*"; }

if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "transformers"))))' 2>/dev/null; then
    say "$PY cannot import torch and transformers (requirements-engine.txt): run make demo, or make setup first" >&2
    exit 2
fi

work=$(mktemp -d)
engine_pid=""
stop_engine() {
    if [ -n "$engine_pid" ] && kill -0 "$engine_pid" 2>/dev/null; then
        kill -TERM "$engine_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$engine_pid" 2>/dev/null || true
        wait "$engine_pid" 2>/dev/null || true
        say "engine stopped (pid $engine_pid)"
    fi
    engine_pid=""
}
cleanup() { stop_engine; rm -rf "$work"; }
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'exit 143' TERM

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"

say "starting the Neuron engine's CPU generator on a tiny random Gemma 4 at $url"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$PY" -m ami.neuron.server --device cpu --tiny-random --host 127.0.0.1 --port "$port" \
    --cpu-threads 1 >"$work/engine.log" 2>&1 &
engine_pid=$!
say "engine pid $engine_pid, log $work/engine.log"

# The port opens only once the model is built, so /health answering 200 means ready.
ready=""
for _ in $(seq 1 240); do
    if ! kill -0 "$engine_pid" 2>/dev/null; then
        say "the engine exited before it was ready; its log ends:" >&2
        tail -n 20 "$work/engine.log" >&2
        exit 1
    fi
    if "$PY" -c "import sys, urllib.request as u; sys.exit(u.urlopen('$url/health', timeout=1).status != 200)" 2>/dev/null; then
        ready=1
        break
    fi
    sleep 0.5
done
if [ -z "$ready" ]; then
    say "the engine did not answer $url/health within 120 s; its log ends:" >&2
    tail -n 20 "$work/engine.log" >&2
    exit 1
fi
say "engine ready"

say "running python -m harness.run --endpoint demo=$url/v1 (agent trial, bench, cost, report)"
say "expect the agent trial to FAIL: the weights are random, so the model neither calls the"
say "count_ids tool with 'id >= 10' nor quotes 8. The run shows what a failing run looks like."
set +e
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN -u AWS_PROFILE \
    -u AWS_DEFAULT_PROFILE -u AWS_CONTAINER_CREDENTIALS_RELATIVE_URI \
    -u AWS_CONTAINER_CREDENTIALS_FULL_URI -u AWS_WEB_IDENTITY_TOKEN_FILE \
    AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true \
    "$PY" -m harness.run --endpoint "demo=$url/v1" --only agent,bench,cost,report \
    --runs "$RUNS" --timeout 60 --concurrency "$CONCURRENCY" --bench-requests "$REQUESTS" \
    --results "$RESULTS" --json "$work/run.json"
rc=$?
set -e
stop_engine

run_dir=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["results_dir"])' "$work/run.json" 2>/dev/null || true)
if [ "$rc" -ne 0 ] || [ -z "$run_dir" ] || [ ! -f "$run_dir/report.html" ]; then
    say "harness.run ended with exit code $rc and no report${run_dir:+ in $run_dir}" >&2
    exit "$(( rc ? rc : 1 ))"
fi
passed=$("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))["agent_runs"]; print(sum(x["ok"] for x in r), len(r), sep="/")' "$work/run.json")
say "agent trial: $passed runs passed (random weights: expected 0); bench, cost and report ran"
say "report: $run_dir/report.html"
