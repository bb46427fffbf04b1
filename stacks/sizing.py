"""What a deployment needs for the model it serves: the planner's placement (kit/fit.py) turned
into stack settings, or a one-line refusal naming the smallest instance type that fits.

For a Gemma 4 size the kit knows (kit/models.py), on a catalog instance type:
- the tensor-parallel degree (vLLM's ``--tensor-parallel-size``; SageMaker's
  ``SM_VLLM_TENSOR_PARALLEL_SIZE``), the largest the model's heads allow on the instance's GPUs;
- the K/V cache for ``max_model_len`` checked to fit beside the weights (``kit.fit``);
- extra root volume and readiness minutes for weights beyond E2B's, which the image families'
  defaults were sized for (stacks/image_families.py): the checkpoint is downloaded at boot and
  loaded, and on Neuron kept again as a sharded copy next to the compiled graphs;
- on SageMaker, the startup health-check and download windows stretched the same way (the API
  accepts 60-3600 s).

Any other model (a package id, another family) deploys as configured on a GPU. For inf2/trn1 the
planner applies the Neuron engine's own rules (kit/fit.py restates them; a test compares) at the
batch the engine compiles, refuses any model without the Neuron port the engine loads, and decides
the compiled shapes (``kit.fit.neuron_compile``: TP degree, batch, total tokens, prompt buckets),
which the stack hands to the boot and stacks/images.py to the image build.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kit import catalog
from kit import fit as kp
from kit.config import ConfigError

SAGEMAKER_TIMEOUT_MAX_S = 3600  # CreateEndpointConfig: ContainerStartupHealthCheckTimeoutInSeconds 60-3600


@dataclass(frozen=True)
class Sizing:
    tp: int | None  # None: leave the engine's default (a model the planner does not know)
    extra_volume_gib: int = 0
    extra_ready_minutes: int = 0
    neuron: kp.NeuronCompile | None = None  # inf2/trn1: what the engine compiles

    def startup_seconds(self, base: int) -> int:
        return min(SAGEMAKER_TIMEOUT_MAX_S, base + 60 * self.extra_ready_minutes)


def sizing(backend_id: str, instance_type: str, model_id: str, max_model_len: int, key: str,
           fix: Callable[[str], str] | None = None) -> Sizing:
    """The deployment's sizing; ConfigError (one line, ``key=value: ...``) when it cannot serve,
    ending with ``fix(smallest type that fits)`` (default: ``set -c key=TYPE``;
    kit/config.py ``BackendConfig.instance_fix`` says it for a variant's item)."""
    try:
        p = kp.check_deploy(backend_id, instance_type, model_id, max_model_len)
        neuron = (kp.neuron_compile(backend_id, instance_type, model_id, max_model_len)
                  if catalog.backend(backend_id).engine_kind == "neuron" else None)
    except kp.PlanError as e:
        hint = ""
        best = str(e).rpartition("that fits: ")[2].partition(" ")[0]
        if best and "that fits: " in str(e):
            hint = "; " + (fix(best) if fix else f"set -c {key}={best}")
        raise ConfigError(f"{key}={instance_type!r}: {e}{hint}") from None
    if p is None:
        return Sizing(None)
    return Sizing(p.tp, p.volume_extra_gib, p.readiness_extra_minutes, neuron)
