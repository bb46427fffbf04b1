"""The ``KIT_*`` variables of the EC2 boot scripts (userdata/*.sh), declared once.

Three kinds, by who sets them:

- ``STACK``: written by the stack to /etc/inference-kit/kit.env (stacks/ec2_backend.py and
  stacks/inference_instance.py, through ``check_env``), for the backends whose engine script is in
  ``engines``; ``required`` ones are always there for those backends, the others only when
  ``when`` holds. kit-boot sources kit.env before lib.sh and the engine script.
- ``SCRIPT``: a default the scripts set themselves (``KIT_X=${KIT_X:-default}`` or
  ``${KIT_X:-default}`` where read); overridable only so tests can run the scripts against local
  stand-ins. The stack never writes them.
- ``DERIVED``: computed inside the scripts from the others; never set from outside.

tests/stacks/test_boot_env.py reads every userdata/*.sh: each ``KIT_*`` name a script reads or
names in its comments is declared here, each declared one is read by some script, SCRIPT and
DERIVED ones are assigned or defaulted there and STACK ones never are, and a STACK variable an
engine script reads without a default is required for that engine. The table in docs/stacks.md
("Boot variables") is ``markdown_table()``'s output, checked by the same test.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

STACK, SCRIPT, DERIVED = "stack", "script", "derived"
# The engine scripts (kit/image_families.py ``ImageFamily.engine_script``); every EC2 backend also
# runs boot.sh and lib.sh.
VLLM_GPU, VLLM_G5G, NEURON = "engine-vllm-gpu.sh", "engine-vllm-g5g.sh", "engine-neuron.sh"
ENGINES = (VLLM_GPU, VLLM_G5G, NEURON)
NAME = re.compile(r"^KIT_[A-Z0-9_]+$")


@dataclass(frozen=True)
class BootVar:
    name: str
    meaning: str
    set_by: str = STACK
    engines: tuple[str, ...] = ENGINES  # STACK: the engine scripts whose backends get it
    required: bool = True  # STACK: always written for those backends (else only ``when``)
    when: str = ""


def _stack(name: str, meaning: str, engines: tuple[str, ...] = ENGINES, when: str = "") -> BootVar:
    return BootVar(name, meaning, STACK, engines, required=not when, when=when)


def _script(name: str, meaning: str) -> BootVar:
    return BootVar(name, meaning, SCRIPT, (), required=False)


def _derived(name: str, meaning: str) -> BootVar:
    return BootVar(name, meaning, DERIVED, (), required=False)


BOOT_VARS: tuple[BootVar, ...] = (
    # what the catalog and the config decided (stacks/ec2_backend.py)
    _stack("KIT_BACKEND", "the catalog backend id (log lines only: nothing branches on it)"),
    _stack("KIT_MODEL", "the model loaded: a Hugging Face id, or package:<scheme>"),
    _stack("KIT_SERVED_MODEL", "the model name the server answers to (the harness's model id)"),
    _stack("KIT_MAX_MODEL_LEN", "tokens per sequence (cdk.json max_model_len): vLLM's --max-model-len, the "
           "Neuron engine's --max-total-tokens (kit/fit.py neuron_compile)"),
    _stack("KIT_MODEL_PARAM", "the SSM parameter naming the newest package build, read when the server starts",
           (VLLM_GPU,), when="the model is a package (stacks/package.py)"),
    _stack("KIT_MODEL_REVISION", "the commit of the weights' repository to serve (-c model_revision; kit/weights.py)",
           when="a commit is pinned"),
    _stack("KIT_VLLM_ARGS", "vLLM's tool-call flags for the model (Backend.engine_settings)", (VLLM_GPU, VLLM_G5G)),
    _stack("KIT_TENSOR_PARALLEL", "vLLM's --tensor-parallel-size: the degree the planner chose (stacks/sizing.py)",
           (VLLM_GPU,), when="the model needs more than one GPU"),
    _stack("KIT_TP_DEGREES", "tensor-parallel degrees the Neuron runtime supports on the instance type", (NEURON,)),
    _stack("KIT_NEURON_PLATFORM", "the instance's Neuron platform (trn1n runs as trn1)", (NEURON,)),
    # the Neuron engine's compiled shapes, the planner's (kit/fit.py neuron_compile); the Neuron
    # image compiles the same values in (stacks/images.py neuron_precompile)
    _stack("KIT_NEURON_TP_DEGREE", "the tensor-parallel degree compiled: the largest of KIT_TP_DEGREES that fits "
           "the model (the planner's)", (NEURON,)),
    _stack("KIT_NEURON_BATCH_SIZE", "sequences the Neuron engine decodes together (its compiled batch)", (NEURON,)),
    _stack("KIT_NEURON_PROMPT_BUCKETS", "prompt lengths the Neuron engine compiles; the largest is its prompt limit",
           (NEURON,)),
    _stack("KIT_VLLM_VERSION", "the vLLM pin installed on the plain DLAMI (kit/pins.py)", (VLLM_GPU,)),
    _stack("KIT_UV_VERSION", "the uv pin that installs it (kit/pins.py)", (VLLM_GPU,)),
    _stack("KIT_PYTHON_VERSION", "the CPython uv installs for it (kit/pins.py)", (VLLM_GPU,)),
    # what the EC2 construct adds (stacks/inference_instance.py)
    _stack("KIT_REGION", "the stack's region (Secrets Manager, SSM, CloudFormation calls)"),
    _stack("KIT_STACK", "the stack's name (the creation-policy signal)"),
    _stack("KIT_HF_SECRET", "the Secrets Manager secret holding the Hugging Face token"),
    _stack("KIT_PORT", "the model server's port on the instance's loopback (Backend.port)"),
    _stack("KIT_READY_TIMEOUT_S", "seconds provisioning may take before it signals failure (the wait "
           "condition's timeout less 5 minutes); the Neuron engine reads it too"),
    _stack("KIT_SIGNAL_URL", "the wait condition handle's presigned URL (success or failure with the log tail)"),
    _stack("KIT_SIGNAL_RESOURCE", "the instance's logical id, for its creation policy's SignalResource"),
    # the scripts' own defaults, overridable only so tests can run them against stand-ins
    _script("KIT_ENV_FILE", "where kit.env is (/etc/inference-kit/kit.env)"),
    _script("KIT_LIB_DIR", "where lib.sh and engine.sh are installed (/usr/local/lib/inference-kit)"),
    _script("KIT_SYSTEMD_DIR", "where the kit's units are written (/etc/systemd/system)"),
    _script("KIT_LOG_DIR", "boot, engine and guard logs (/var/log/inference-kit)"),
    _script("KIT_STATE_DIR", "ready, signalled and idle markers (/var/lib/inference-kit)"),
    _script("KIT_IMDS_URL", "the instance metadata service (http://169.254.169.254)"),
    _script("KIT_SIGNAL_RETRIES", "attempts per signal (5)"),
    _script("KIT_RETRY_DELAY_S", "seconds between attempts (15)"),
    _script("KIT_APT_LOCKS", "the apt and dpkg locks waited for before apt-get"),
    _script("KIT_APT_WAIT_S", "how long to wait for them (600)"),
    _script("KIT_APT_POLL_S", "how often to look (5)"),
    _script("KIT_HEALTH_PATH", "the server's health path (/health)"),
    _script("KIT_IDLE_MINUTES", "idle stop when the instance tag is unreadable (0: never)"),
    _script("KIT_PACKAGE_DIR", "where a package is synced (/opt/inference-kit/package)"),
    _script("KIT_SERVED_RECORD", "what the instance serves, read by the harness (/etc/inference-kit/served-model.json)"),
    _script("KIT_NEURON_VENV", "the Neuron engine's venv (/opt/inference-kit/neuron)"),
    _script("KIT_NEURON_TOOLS", "the Neuron SDK's tools (/opt/aws/neuron/bin)"),
    # computed by the scripts
    _derived("KIT_ENGINE_LOG", "the engine's log, under KIT_LOG_DIR"),
    _derived("KIT_BOOT_LOG", "provisioning's log, under KIT_LOG_DIR"),
    _derived("KIT_VENV", "the vLLM venv (/opt/inference-kit/vllm)"),
    _derived("KIT_NEURON_SERVE", "the Neuron engine's server, in KIT_NEURON_VENV"),
    _derived("KIT_MODEL_DIR", "where the Neuron engine's weights are downloaded"),
)
BY_NAME = {v.name: v for v in BOOT_VARS}


def for_engine(engine_script: str) -> tuple[BootVar, ...]:
    """The STACK variables a backend booting ``engine_script`` may be given."""
    return tuple(v for v in BOOT_VARS if v.set_by == STACK and engine_script in v.engines)


def check_env(env: Mapping[str, str], engine_script: str) -> dict[str, str]:
    """``env`` as the stack writes it to kit.env for a backend booting ``engine_script``: every
    key a STACK variable declared for that engine, every required one there. A copy, sorted by
    name (as kit.env is written); ValueError naming the first problem otherwise."""
    if engine_script not in ENGINES:
        raise ValueError(f"engine script {engine_script!r} is not one of {', '.join(ENGINES)}")
    allowed = {v.name: v for v in for_engine(engine_script)}
    for k in env:
        if not NAME.match(k):
            raise ValueError(f"user-data variable {k!r} must look like KIT_NAME")
        if k not in allowed:
            v = BY_NAME.get(k)
            why = "not declared in kit/contracts/boot_env.py" if v is None else \
                f"set by the scripts, not the stack ({v.set_by})" if v.set_by != STACK else \
                f"declared only for {', '.join(v.engines)}"
            raise ValueError(f"user-data variable {k} for {engine_script}: {why}")
    missing = [k for k, v in allowed.items() if v.required and k not in env]
    if missing:
        raise ValueError(f"user data for {engine_script} lacks {', '.join(missing)} (required by kit/contracts/boot_env.py)")
    return dict(sorted(env.items()))


def markdown_table(backends_by_engine: Mapping[str, list[str]]) -> str:
    """The STACK variables as docs/stacks.md shows them: name, meaning, which backends get it."""
    everyone = sorted({b for bs in backends_by_engine.values() for b in bs})
    rows = ["| variable | meaning | backends |", "| --- | --- | --- |"]
    for v in BOOT_VARS:
        if v.set_by != STACK:
            continue
        bs = sorted({b for e in v.engines for b in backends_by_engine.get(e, [])})
        who = "all EC2" if bs == everyone else ", ".join(bs)
        rows.append(f"| `{v.name}` | {v.meaning} | {who}{f' ({v.when})' if v.when else ''} |")
    return "\n".join(rows) + "\n"
