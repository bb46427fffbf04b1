# Two set-ups, both idempotent (a stamp per requirements hash skips pip when nothing changed):
# `make setup-run`, an attendee's: Python 3.11, Node 20 with npm, the lean requirements.txt and the
#   pinned CDK CLI; no system package, no root. Enough for plan, preflight, deploy, run, leftovers
#   and `npx cdk synth`.
# `make setup`, a kit developer's: the dev set (every requirements file) and the system packages
#   the tests use for real (`make sysdeps`); what `make test` and `make check` need.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HASH_RUN := $(shell cat requirements.txt constraints.txt | sha1sum | cut -c1-12)
HASH_DEV := $(shell cat requirements*.txt constraints.txt | sha1sum | cut -c1-12)
STAMP_RUN := $(VENV)/.stamp-run-$(HASH_RUN)
STAMP_DEV := $(VENV)/.stamp-dev-$(HASH_DEV)
PIP := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

# Synth and tests make no network call: no telemetry, no notices, no account, no IMDS.
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_EC2_METADATA_DISABLED := true
unexport CDK_DEFAULT_ACCOUNT

.PHONY: help setup setup-run sysdeps synth lint ruff pytest test check docs docs-check run deploy leftovers clean bench-fidelity bench-tunnel bench-engine patch-check port-check demo

help:
	@echo "make setup-run   attendee set-up: .venv with requirements.txt, the CDK CLI (Python 3.11, Node 20; no root)"
	@echo "make run    make setup-run, then python -m harness.run ARGS='...'"
	@echo "make deploy ARGS='G6Stack ...'   check the machine images, then npx cdk deploy (no ARGS: all backends)"
	@echo "make leftovers   after cdk destroy: what still exists, \$$/month, how to remove it"
	@echo "make setup  developer set-up: the dev set + the system packages the tests use (make sysdeps)"
	@echo "make check  the fast tier (~1 min 20 s on 2 cores, near 3 min on a busy machine): ruff, then"
	@echo "            the tests not marked slow, the stacks smoke subset and the docs check among them"
	@echo "make test   make setup, synth every stack, lint, every test: what CI runs"
	@echo "make docs   regenerate the docs' tables from the catalog, the price snapshot and the context keys"
	@echo "make docs-check   the docs check alone: relative links, headings, repository paths"
	@echo "make demo   the whole flow on this machine, no AWS: tiny engine, harness.run, report (dev set)"
	@echo "make port-check   the Neuron E2B port on CPU vs transformers past the window (KIT_PORT_PATCH=off: as pinned)"
	@echo "make bench-fidelity | bench-tunnel | bench-engine   the kit measuring itself (harness/calibration)"
	@echo "make clean  remove .venv, node_modules, cdk.out"

# The versions the kit needs, checked before anything is installed: one line and exit 1 otherwise
# (pyproject.toml requires-python; the CDK CLI 2.x supports Node 20 and newer).
$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 11) else \
	  f"$(PYTHON) is Python {v.major}.{v.minor}; the kit needs 3.11 or newer (make PYTHON=python3.11 ...)")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip==25.3 2>/dev/null || true

$(STAMP_RUN): | $(VENV)/bin/python
	$(PIP) -r requirements.txt
	rm -f $(VENV)/.stamp-run-*; touch $@

# The dev set = requirements.txt + every extra + the test tools (pyproject.toml's `dev` extra).
$(STAMP_DEV): | $(VENV)/bin/python
	$(PIP) -r requirements.txt -r requirements-engine.txt -r requirements-package.txt \
	  -r requirements-accuracy.txt -r requirements-dev.txt
	rm -f $(VENV)/.stamp-dev-* $(VENV)/.stamp-run-*; touch $@ $(STAMP_RUN)

node_modules/.package-lock.json: package-lock.json
	@v=$$(node --version 2>/dev/null); m=$${v#v}; [ "$${m%%.*}" -ge 20 ] 2>/dev/null || \
	  { echo "node is $${v:-not installed}; the CDK CLI needs Node 20 or newer (with npm)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# System packages the tests use for real: OpenSSH server and client (tunnel tests), nginx's
# stream module (the tunnel measurement's two-relay control), Chromium (report
# screenshot), patch (the sm_75 patch check), jq and curl (the image smoke-test script). Installed only where missing and only as root; otherwise say what to install.
sysdeps:
	@missing=""; command -v /usr/sbin/sshd >/dev/null || missing="$$missing openssh-server"; \
	command -v ssh >/dev/null || missing="$$missing openssh-client"; \
	command -v nginx >/dev/null || missing="$$missing nginx-light"; \
	ls /usr/lib/nginx/modules/ngx_stream_module.so >/dev/null 2>&1 || missing="$$missing libnginx-mod-stream"; \
	command -v chromium >/dev/null || missing="$$missing chromium fonts-liberation"; \
	command -v patch >/dev/null || missing="$$missing patch"; \
	command -v jq >/dev/null || missing="$$missing jq"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null \
	      || { echo "could not apt-get install:$$missing"; exit 1; }; \
	  else echo "missing system packages:$$missing (sudo apt-get install$$missing)"; exit 1; fi; \
	fi

setup: $(STAMP_DEV) node_modules/.package-lock.json sysdeps
setup-run: $(STAMP_RUN) node_modules/.package-lock.json

synth: setup
	rm -rf cdk.out
	npx cdk synth -q -o cdk.out

ruff: $(STAMP_DEV)
	$(VENV)/bin/ruff check .

lint: synth ruff
	$(PY) -m kit.regions lint cdk.out  # --regions = each template's own region, not the shell's
	$(VENV)/bin/shellcheck $$(git ls-files '*.sh' 2>/dev/null || find . -name '*.sh' -not -path './node_modules/*' -not -path './.venv/*')

# Two workers, each test file whole in one (its module fixtures, e.g. a synthesized app, built
# once): most tests wait on servers, subprocesses and sockets, so two processes overlap that
# waiting on 2 cores. Measured here on a quiet machine, same commit (docs/development.md).
PYTEST_WORKERS ?= 2
pytest: setup
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: lint pytest

# The fast tier while editing: no `cdk synth` step, no test marked slow (pyproject.toml's `slow`
# marker, set per module or per test in tests/conftest.py from measured durations). It includes the
# stacks smoke subset (one synthesis of the whole app with its assertions, the backend-row and
# subnet-plan tests) and the docs check. `make test` is still what CI runs.
check: $(STAMP_DEV) sysdeps ruff
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile

# The docs' generated tables, from the rows they show: the backend and price tables (kit/catalog.py
# and harness/cost/price_snapshot.json) and the context-key reference (kit/config.py KEYS).
# tests/cost/test_tables.py and tests/kit/test_config_doc.py fail, naming this, until they agree.
docs: $(STAMP_RUN)
	$(PY) -m harness.cost.tables --write
	$(PY) -m kit.config_doc --write

docs-check: $(STAMP_DEV)
	$(PY) -m pytest -q -p no:cacheprovider tests/test_docs_links.py

run: setup-run
	$(PY) -m harness.run $(ARGS)

# cdk deploy of the backends in ARGS (none: all), after checking their machine images exist
# (harness/account/deploy.py): a missing image is one line with its build command, and nothing is created.
deploy: setup-run
	$(PY) -m harness deploy $(ARGS)

# After cdk destroy: what the kit made that still exists, per region, $$/month and removal command;
# exit 1 while anything bills (harness/account/leftovers.py).
leftovers: setup-run
	$(PY) -m harness leftovers $(ARGS)

# Apply ami/patches (Turing shared memory) to the pinned vLLM sdist from PyPI; also in pytest.
patch-check: setup-run
	$(PY) -m ami.check_patch

# The Gemma 4 E2B Neuron port's model code on CPU against transformers, past the sliding window,
# with the kit's patch (ami/neuron-port/gemma4-e2b-port.patch); KIT_PORT_PATCH=off runs the port as
# pinned and must fail. Prints, per case, the largest logit difference and the first differing
# position. Also in `make test` (tests/neuron/test_port_check.py).
port-check: $(STAMP_DEV)
	$(PY) -m tests.neuron.port_check $(ARGS)

# The whole flow without AWS: the Neuron engine's CPU generator on a tiny random Gemma 4 on
# loopback, harness.run against it (agent trial, bench, cost, report), engine stopped, report path
# printed. Needs requirements-engine.txt (torch, transformers), part of the dev set-up.
demo: $(STAMP_DEV)
	PY=$(PY) bash scripts/demo.sh

# The kit measuring itself (harness/calibration/): scripts that print numbers, not tests. Run
# them on a quiet machine; ARGS passes options (see each script's --help).
# Load-benchmark fidelity and capacity vs GuideLLM (docs/bench.md); installs GuideLLM into
# .venv-guidellm on first use (~4-5 min).
bench-fidelity: setup
	$(PY) -m harness.calibration.fidelity $(ARGS)

# What the SSH tunnel costs a measurement: direct vs tunnel through a loopback sshd (docs/harness.md).
bench-tunnel: setup
	$(PY) -m harness.calibration.tunnel $(ARGS)

# With no ARGS: the engine's host efficiency on a paced stand-in device at Gemma 4's vocabulary
# (starts `python -m ami.neuron.server --device simulated` per level; needs the engine extras).
# With ARGS, the cases against a running engine, e.g.
# make bench-engine ARGS='--url http://127.0.0.1:8000 --model tiny-random-gemma4 --tokens 64'
bench-engine: $(STAMP_DEV)
	$(PY) -m harness.calibration.neuron_engine $(or $(ARGS),--simulated)

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache
