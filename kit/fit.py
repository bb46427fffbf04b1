"""Where a Gemma 4 size fits, how fast one stream could go, and what the deployment needs.

Per backend (the catalog's) and candidate instance (every catalog instance type the backend
accepts): the bytes it must hold per accelerator (weights, the K/V cache for the context times
the concurrent sequences, a runtime allowance) against what it has, the tensor-parallel degree,
and the single-stream bandwidth ceiling (``bandwidth x degree / bytes read per token``, the
roofline's formula over kit/models.py's reads). Used by ``python -m harness plan`` (prices added
there), by ``make run``'s offline plan and by the stacks, which size a deployment with it or
refuse a type that cannot hold the model (``check_deploy``).

Rules, and where each comes from:

- vLLM (every GPU backend): the instance's GPUs serve one model with tensor parallelism, the
  degree dividing the attention heads and each KV-head count dividing it or divided by it (vLLM's
  attention layer asserts both). Weights and K/V shard across the degree; a layer with fewer KV
  heads than the degree keeps one head per GPU. A GPU offers ``GPU_MEMORY_UTILIZATION`` of its
  memory (vLLM's ``--gpu-memory-utilization`` default 0.9) for weights, activations and cache.
- Neuron: the kit's engine's rules (ami/neuron/neuron_config.py ``plan``), restated here because
  the core and the harness never import the engine (the Neuron image ships it alone, and it never
  imports the core); tests/kit/test_plan.py checks both give the same degree, bytes and refusals:
  the largest catalog degree that fits the NeuronCores and divides the heads, the largest
  embedding table split so no NeuronCore gathers more than 4 GB (the seed's silent zeros above
  ~4-5 GB), weights over the degree plus the engine's K/V bound within 85% of 16 GiB per core,
  16-bit weights only. A size with no public Neuron port is reported as such (kit/models.py).
- The runtime allowance (``GPU_RUNTIME_GIB``) and the download/load rates behind the volume and
  readiness figures are the kit's own allowances, printed with the numbers, not outside facts.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from kit import catalog
from kit import models as km
from kit.errors import KitError

# vLLM's --gpu-memory-utilization default: the fraction of each GPU's memory vLLM takes.
GPU_MEMORY_UTILIZATION = 0.90
# The kit's allowance per GPU for the CUDA context, activations and CUDA graphs (vLLM measures
# the real figure when it starts; this keeps the plan from promising the last gigabyte).
GPU_RUNTIME_GIB = 2.0
KV_BYTES = 2  # bf16/fp16 K/V cache
# Volume and readiness allowances for weights beyond E2B's (the families' defaults hold E2B): the
# checkpoint is downloaded once and, on Neuron, kept again as a sharded copy next to the NEFFs.
DOWNLOAD_BYTES_PER_S = 50e6  # conservative: Hugging Face to an instance, then load
VOLUME_HEADROOM = 1.25
DEFAULT_CONTEXT = 4096  # the kit's max_model_len default (stacks/config.py)
# The Neuron engine's rules (ami/neuron/neuron_config.py, same names; tests/kit/test_plan.py
# compares): 16 GiB per NeuronCore of which 85% for weights and cache, no single gather above
# 4 GB (the seed's silent zeros at ~4-5 GB), 16-bit weights only.
NEURON_HBM_PER_CORE_BYTES = 16 * 2**30
NEURON_HBM_USABLE = 0.85
NEURON_MAX_GATHER_BYTES = 4 * 10**9
NEURON_DTYPES = ("bf16", "fp16")
# What the Neuron engine compiles for a deployment (``neuron_compile``), the kit's own rule: the
# engine's default shapes (ami/neuron/neuron_config.py DEFAULT_SHAPES: batch 4, prompt buckets 128,
# 512, 2048 of 4096 total tokens; tests/kit/test_neuron_compile.py compares) generalized to any
# max_model_len: the largest prompt is half the total (room to generate as long as it reads),
# smaller buckets every 4x from 128 (short prompts run on small graphs), batch 4 whatever the size.
NEURON_BATCH_SIZE = 4
NEURON_SMALLEST_BUCKET = 128
NEURON_BUCKET_STEP = 4


@dataclass(frozen=True)
class ModelChoice:
    """What is being planned: a Gemma 4 size (or a config.json), its weights' precision."""

    label: str  # what the user typed
    arch: km.DecoderArch
    precision: str  # bf16 | fp16 | fp8 | int8 | int4 (weights of the decoder layers)
    facts: km.ModelFacts | None  # None for a config.json the kit does not know by size
    model_id: str | None  # the Hugging Face id to serve, when known

    @property
    def embed_precision(self) -> str:
        return "bf16" if self.precision in km.GROUP_SCALED else self.precision


class PlanError(KitError, ValueError):
    """Bad input to the planner; str(e) is the one line to show."""


def choose_model(spec: str, precision: str | None = None) -> ModelChoice:
    """A size word (E2B, E4B, 12B, 26B-A4B, 31B), a google/gemma-4-* id, or a path to a
    config.json; ``precision`` defaults to the id's (int4 for a w4a16 id, else bf16)."""
    if precision is not None and precision not in km.BYTES_PER_WEIGHT:
        raise PlanError(f"--precision {precision!r}; valid: {', '.join(km.BYTES_PER_WEIGHT)}")
    facts = km.facts_for(spec)
    if facts is not None:
        model_id = spec if "/" in spec else facts.hf_id
        return ModelChoice(spec, facts.arch, precision or km.default_precision(model_id), facts, model_id)
    if spec.endswith(".json") or "/" in spec and not spec.startswith(("google/", "http")):
        try:
            arch = km.load_config(spec)
        except ValueError as e:
            raise PlanError(str(e)) from None
        return ModelChoice(spec, arch, precision or "bf16", None, None)
    raise PlanError(f"--model {spec!r} is not a Gemma 4 size, google/gemma-4-* id or config.json path; "
                    f"valid sizes: {km.valid_words()}")


def choose_model_or_none(spec: str) -> ModelChoice | None:
    """``choose_model`` for a model id, None when the kit has no facts for it (another family)."""
    return choose_model(spec) if km.facts_for(spec) else None


@dataclass
class Placement:
    backend: str
    instance_type: str
    fits: bool
    deployable: bool  # fits, and the backend's engine can serve this model
    reason: str  # one line: why not, or what it takes
    tp: int | None
    devices: int  # GPUs or NeuronCores of the instance
    weights_bytes: float  # total, before sharding
    kv_bytes: float  # total for context x concurrency
    per_device_bytes: float | None  # what one GPU/NeuronCore must hold
    per_device_budget: float | None  # what it offers
    ceiling_tok_s: float | None  # one stream, bandwidth bound
    bytes_read_per_token: float
    warnings: list[str] = field(default_factory=list)
    volume_extra_gib: int = 0
    readiness_extra_minutes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _gpu_tp(arch: km.DecoderArch, gpus: int) -> int | None:
    """Largest degree <= gpus that vLLM accepts for this model (heads divisible; each KV-head
    count divisible by it or dividing it)."""
    kv_counts = {arch.kv_heads, *(arch.layer_kv_heads(i) for i in range(arch.layers))}
    for tp in range(gpus, 0, -1):
        if arch.heads % tp == 0 and all(kv % tp == 0 or tp % kv == 0 for kv in kv_counts):
            return tp
    return None


def _gpu_kv_per_device(arch: km.DecoderArch, tokens: int, concurrency: int, tp: int) -> float:
    per_seq = sum(2 * arch._span(i, tokens) * max(1, arch.layer_kv_heads(i) // tp) * arch.layer_head_dim(i) * KV_BYTES
                  for i in range(arch.layers) if not arch.is_kv_shared(i))
    return per_seq * concurrency


def checkpoint_bytes(choice: ModelChoice) -> float:
    """Bytes of the text weights as stored (what is downloaded and held)."""
    return choice.arch.weights_bytes(choice.precision, choice.embed_precision)


def _extras(choice: ModelChoice, neuron: bool) -> tuple[int, int]:
    """(extra volume GiB, extra readiness minutes) beyond what the image families hold for E2B."""
    base = km.GEMMA_4_E2B.weights_bytes("bf16")
    extra = max(0.0, checkpoint_bytes(choice) - base) * (2 if neuron else 1)
    gib = math.ceil(extra * VOLUME_HEADROOM / 2**30) if extra else 0
    minutes = math.ceil(extra / DOWNLOAD_BYTES_PER_S / 60) if extra else 0
    return gib, minutes


def plan_gpu(backend: catalog.Backend, spec: catalog.InstanceSpec, choice: ModelChoice,
             context: int, concurrency: int) -> Placement:
    arch = choice.arch
    weights = checkpoint_bytes(choice)
    read = arch.weights_read_per_token(choice.precision, choice.embed_precision) + arch.kv_read_per_token(context)
    tp = _gpu_tp(arch, spec.accelerators)
    kv_total = arch.kv_cache_bytes(context) * concurrency
    warnings = _precision_warnings(spec, choice)
    gib, minutes = _extras(choice, neuron=False)
    if tp is None:
        return Placement(backend.id, spec.name, False, False,
                         f"no tensor-parallel degree <= {spec.accelerators} divides {arch.heads} heads",
                         None, spec.accelerators, weights, kv_total, None, None, None, read, warnings, gib, minutes)
    budget = spec.memory_bytes_per_device * GPU_MEMORY_UTILIZATION
    need = weights / tp + _gpu_kv_per_device(arch, context, concurrency, tp) + GPU_RUNTIME_GIB * 2**30
    fits = need <= budget
    ceiling = spec.bandwidth_per_device_gb_s * tp * 1e9 / read
    reason = (f"{_gb(weights)} weights / TP {tp} + {_gb(_gpu_kv_per_device(arch, context, concurrency, tp))} KV "
              f"+ {GPU_RUNTIME_GIB:g} GiB runtime = {_gb(need)} per GPU "
              f"{'<=' if fits else '>'} {_gb(budget)} ({GPU_MEMORY_UTILIZATION:.0%} of {_gb(spec.memory_bytes_per_device)})")
    deployable = fits
    if choice.facts and choice.facts.engine_note:
        warnings.append(choice.facts.engine_note)
    if tp < spec.accelerators:
        warnings.append(f"uses {tp} of {spec.accelerators} GPUs (tensor parallelism must divide the heads)")
    return Placement(backend.id, spec.name, fits, deployable, reason, tp, spec.accelerators, weights, kv_total,
                     need, budget, ceiling, read, warnings, gib, minutes)


def _neuron_kv_bound(text: dict, tokens: int, batch: int) -> int:
    """The K/V cache on one NeuronCore as the engine's Gemma 4 E2B port allocates it (the engine's
    ``kv_cache_bytes``, ami/neuron/neuron_config.py, which cites the port's lines): every layer,
    the KV-shared ones too, at its own head dim (sliding ``head_dim``, full ``global_head_dim``),
    all at one length max(sliding_window, tokens), all KV heads (replicated, not split), the
    whole compiled batch. E2B at 4096 tokens, batch 4: 0.70 GB."""
    layers = text["num_hidden_layers"]
    sliding = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    full = text.get("global_head_dim") or sliding
    width = {"full_attention": full, "sliding_attention": sliding}
    heads = sum(width.get(k, max(full, sliding)) for k in (text.get("layer_types") or [None] * layers)[:layers])
    length = max(text.get("sliding_window") or 0, tokens)
    return 2 * text["num_key_value_heads"] * heads * length * batch * KV_BYTES


def neuron_kv_read_per_token(choice: ModelChoice, context: int) -> int | None:
    """K/V bytes one decode step of one sequence reads on the Neuron engine: its whole cache, every
    layer at the compiled length (``_neuron_kv_bound`` at batch 1). None without the size's facts."""
    return _neuron_kv_bound(km.TEXT_CONFIGS[choice.facts.size], context, 1) if choice.facts else None


def plan_neuron(backend: catalog.Backend, spec: catalog.InstanceSpec, choice: ModelChoice,
                context: int, concurrency: int) -> Placement:
    arch = choice.arch
    weights = checkpoint_bytes(choice)
    # What one decode step of one stream reads on the engine: the weights, and the sequence's whole
    # K/V cache (every layer at the compiled length). The port's per-layer cache shapes make NxD
    # Inference take each layer's full length instead of the token bucket's (kv_cache_manager.py
    # l.332-333 at cd3abf3: "if hasattr(self, 'v_shapes'): seq_len = self.v_shapes[idx][2]"), so
    # smaller token buckets read no less. Without a port (no facts) the architecture's reads.
    kv_read = neuron_kv_read_per_token(choice, context)
    read = arch.weights_read_per_token(choice.precision, choice.embed_precision) + (
        arch.kv_read_per_token(context) if kv_read is None else kv_read)
    warnings = _precision_warnings(spec, choice)
    gib, minutes = _extras(choice, neuron=True)
    budget = NEURON_HBM_PER_CORE_BYTES * NEURON_HBM_USABLE

    def refuse(reason: str, kv: float = 0.0) -> Placement:
        return Placement(backend.id, spec.name, False, False, f"Neuron engine: {reason}", None, spec.devices,
                         weights, kv, None, budget, None, read, warnings, gib, minutes)

    if choice.facts is None:
        return refuse("plans known Gemma 4 sizes only")
    if choice.precision not in NEURON_DTYPES:
        return refuse(f"--dtype {choice.precision} refused: it compiles 16-bit weights only"
                      + (" (int4 is widened to bf16 before every matmul on NeuronCore-v2, 27x slower per call)"
                         if choice.precision == "int4" else ""))
    text = km.TEXT_CONFIGS[choice.facts.size]
    kv = float(_neuron_kv_bound(text, context, concurrency))
    degrees = catalog.neuron_tp_degrees(spec.name)
    fits = [d for d in degrees if d <= spec.neuron_cores and arch.heads % d == 0]
    if not fits:
        return refuse(f"none of the tp degrees {list(degrees)} fits the {spec.neuron_cores} NeuronCores and "
                      f"divides the model's {arch.heads} attention heads", kv)
    tp = max(fits)
    table = max(arch.embed_params, arch.ple_table_params) * 2
    gather = math.ceil(table / tp)
    if gather > NEURON_MAX_GATHER_BYTES:
        return refuse(f"tp degree {tp} leaves the largest embedding table at {gather / 1e9:.2f} GB per NeuronCore, "
                      f"above the 4.00 GB single-gather limit (silent zeros)", kv)
    per_core = math.ceil(weights / tp) + kv
    if per_core > budget:
        return refuse(f"{weights / 1e9:.1f} GB of weights over tp degree {tp} plus a {kv / 1e9:.2f} GB KV cache "
                      f"needs {per_core / 2**30:.1f} GiB per NeuronCore, over the {budget / 2**30:.1f} GiB usable", kv)
    ceiling = spec.bandwidth_per_device_gb_s * tp * 1e9 / read
    reason = (f"{_gb(weights)} weights / TP {tp} + {_gb(kv)} KV (engine bound, not split) = "
              f"{_gb(per_core)} per NeuronCore <= {_gb(budget)} (85% of 16 GiB); largest table "
              f"{_gb(table)} split {tp} ways = {_gb(gather)} per gather (limit 4 GB)")
    port = choice.facts.neuron_port
    if port is None:
        warnings.append(f"no public Neuron port of {arch.name}: the kit's Neuron engine cannot serve it")
    elif port != km.KIT_NEURON_PORT:
        warnings.append(port)
    return Placement(backend.id, spec.name, True, port == km.KIT_NEURON_PORT, reason, tp, spec.devices, weights,
                     kv, float(per_core), budget, ceiling, read, warnings, gib, minutes)


def _precision_warnings(spec: catalog.InstanceSpec, choice: ModelChoice) -> list[str]:
    support = spec.chip.precision.get(choice.precision, "unknown")
    if support == "native":
        return []
    text = {"widened16": "is widened to 16-bit before every matmul (the ceiling assumes the stored bytes are read)",
            "emulated": "is emulated: expect well below the ceiling",
            "unsupported": "is not supported: the engine must convert the weights",
            "hw_only": "exists in hardware, not in the compiler"}.get(support, "support unknown")
    return [f"{choice.precision} on {spec.chip.name} {text}"]


def _gb(b: float | None) -> str:
    return "—" if b is None else f"{b / 1e9:.1f} GB"


def candidates(backend: catalog.Backend) -> list[catalog.InstanceSpec]:
    """Every catalog instance type the backend accepts, smallest first (accelerator memory,
    then fewer devices, then vCPUs)."""
    ok = [s for name, s in catalog.INSTANCES.items() if s.accelerators and backend.instance_problem(name) is None]
    if backend.engine_kind == "neuron" and backend.instance_type:  # inf2 plans inf2 types, trn1 trn1 types
        ok = [s for s in ok if catalog.neuron_platform(s.name) == catalog.neuron_platform(backend.instance_type)]
    return sorted(ok, key=size_key)


def size_key(s: catalog.InstanceSpec) -> tuple:
    return (s.accel_memory_gib * (2**30 if s.neuron_cores else 1e9), s.devices, s.vcpus, s.name)


def place(backend: catalog.Backend, spec: catalog.InstanceSpec, choice: ModelChoice, context: int,
          concurrency: int) -> Placement:
    if backend.engine_kind == "neuron":
        return plan_neuron(backend, spec, choice, context, concurrency)
    return plan_gpu(backend, spec, choice, context, concurrency)


def check_inputs(choice: ModelChoice, context: int, concurrency: int) -> None:
    if context < 256:
        raise PlanError(f"--context {context} is too short; valid: 256 to {choice.arch.max_context or 131072}")
    if choice.arch.max_context and context > choice.arch.max_context:
        raise PlanError(f"--context {context} exceeds {choice.arch.name}'s {choice.arch.max_context} "
                        f"(max_position_embeddings); valid: 256 to {choice.arch.max_context}")
    if not 1 <= concurrency <= 1024:
        raise PlanError(f"--concurrency {concurrency}; valid: 1 to 1024")


def plan(choice: ModelChoice, *, context: int = DEFAULT_CONTEXT, concurrency: int = 1,
         backends: tuple[str, ...] = catalog.BACKEND_IDS) -> dict[str, list[Placement]]:
    """Placements per backend id (an empty list for a backend with no open weights)."""
    check_inputs(choice, context, concurrency)
    out: dict[str, list[Placement]] = {}
    for bid in backends:
        b = catalog.backend(bid)
        out[bid] = ([place(b, s, choice, context, concurrency) for s in candidates(b)]
                    if b.open_weights else [])
    return out


def smallest_fit(backend_id: str, choice: ModelChoice, context: int, concurrency: int = 1) -> Placement | None:
    """The smallest catalog instance type where the backend can serve the model, None if none."""
    b = catalog.backend(backend_id)
    for s in candidates(b):
        p = place(b, s, choice, context, concurrency)
        if p.deployable:
            return p
    return None


def deploy_concurrency(backend: catalog.Backend) -> int:
    """The sequences a deployment's memory is planned for: one for vLLM (its K/V cache is paged
    and shared, one sequence must fit), the compiled batch for the Neuron engine (it holds K/V for
    every slot of the batch it compiled, ``NEURON_BATCH_SIZE``)."""
    return NEURON_BATCH_SIZE if backend.engine_kind == "neuron" else 1


def check_deploy(backend_id: str, instance_type: str, model_id: str, context: int) -> Placement | None:
    """The placement a deployment of ``model_id`` on ``instance_type`` gets (sizing for the stack),
    None for a model the kit has no facts for on a GPU (it deploys as configured), PlanError (one
    line naming the smallest type that fits) when the type cannot serve it. On a Neuron backend a
    model the kit has no facts for is refused too: the engine loads only the Gemma 4 E2B port's
    class (kit/models.py KIT_NEURON_PORT), so any other checkpoint would fail at boot, after the
    instance was paid for."""
    b = catalog.backend(backend_id)
    facts = km.facts_for(model_id)
    if b.engine_kind == "neuron" and (facts is None or facts.neuron_port != km.KIT_NEURON_PORT):
        why = ("not a Gemma 4 size the kit knows" if facts is None
               else facts.neuron_port or f"no public Neuron port of {facts.arch.name}")
        served = ", ".join(f.hf_id for f in km.MODELS.values() if f.neuron_port == km.KIT_NEURON_PORT)
        raise PlanError(f"{model_id}: the kit's Neuron engine serves only the model whose Neuron port it loads "
                        f"(Gemma 4 E2B, NxD Inference contrib PR #115), and {why}; valid: {served}")
    if facts is None:
        return None
    spec = catalog.INSTANCES.get(instance_type)
    choice = choose_model(model_id)
    n = deploy_concurrency(b)
    if (spec is None or not spec.accelerators) and b.engine_kind != "neuron":
        # A GPU type the catalog has no row for (g4dn.xlarge, g6.4xlarge pass the config's family
        # and botocore checks): with no GPU count or memory the planner cannot check the model fits
        # nor size TP, volume and readiness, and the stack would deploy unsized (a 31B on a 16 GB
        # T4 fails at load, after the instance was paid for). Refuse, naming a catalog type.
        check_inputs(choice, context, n)
        best = smallest_fit(backend_id, choice, context, n)
        where = (f"smallest {b.id} type that fits: {best.instance_type} (TP {best.tp})" if best
                 else f"no {b.id} type in the catalog serves it")
        raise PlanError(f"{model_id}: {instance_type} has no GPU count or memory in the catalog "
                        f"(kit/catalog.py), so the planner cannot check it fits; {where}")
    if spec is None or not spec.accelerators:
        return None  # Neuron: kit.config refused a type without a NeuronCore count first
    check_inputs(choice, context, n)
    p = place(b, spec, choice, context, n)
    if p.deployable:
        return p
    best = smallest_fit(backend_id, choice, context, n)
    where = (f"smallest {b.id} type that fits: {best.instance_type} (TP {best.tp})" if best
             else f"no {b.id} type in the catalog serves it")
    why = p.reason if not p.fits else "; ".join(p.warnings)
    batch = f", compiled batch {n}" if b.engine_kind == "neuron" else ""
    raise PlanError(f"{model_id} ({choice.precision}, max_model_len {context}{batch}) does not fit {instance_type}: "
                    f"{why}; {where}")


def neuron_prompt_buckets(total_tokens: int) -> tuple[int, ...]:
    """The prompt lengths the Neuron engine compiles for ``total_tokens`` per sequence (see
    NEURON_BATCH_SIZE's comment): 4096 -> (128, 512, 2048), 8192 -> (128, 512, 2048, 4096)."""
    top = total_tokens // 2
    out, b = [], NEURON_SMALLEST_BUCKET
    while b < top:
        out.append(b)
        b *= NEURON_BUCKET_STEP
    return (*out, top)


@dataclass(frozen=True)
class NeuronCompile:
    """What the Neuron engine compiles for one deployment, decided once here from the planner's
    facts and handed, as they are, to both places that compile: the instance's boot (the stack's
    KIT_* variables, userdata/engine-neuron.sh) and the Neuron image's build (neuron-engine.yaml's
    parameters, ami/scripts/neuron-precompile.sh). Equal values give the engine equal cache keys
    (ami/neuron/neuron_config.py cache_key), so a boot finds the image's graphs."""

    tp_degree: int  # the planner's: the largest supported degree that fits and divides the heads
    tp_degrees: tuple[int, ...]  # the runtime's degrees on the instance (catalog.neuron_tp_degrees)
    platform: str  # catalog.neuron_platform
    batch_size: int
    total_tokens: int  # max_model_len: prompt + generated per sequence
    prompt_buckets: tuple[int, ...]

    def engine_args(self) -> list[str]:
        """The engine's command-line flags for these shapes (ami/neuron/cli.py), in the order both
        scripts pass them."""
        return ["--tp-degrees", ",".join(map(str, self.tp_degrees)), "--platform", self.platform,
                "--tp-degree", str(self.tp_degree), "--batch-size", str(self.batch_size),
                "--max-total-tokens", str(self.total_tokens),
                "--prompt-buckets", ",".join(map(str, self.prompt_buckets))]


def neuron_compile(backend_id: str, instance_type: str, model_id: str, context: int) -> NeuronCompile:
    """The compile of ``model_id`` on ``instance_type`` at ``context`` tokens per sequence;
    PlanError (one line) when the planner refuses it (``check_deploy``)."""
    if catalog.backend(backend_id).engine_kind != "neuron":
        raise PlanError(f"{backend_id} does not run the Neuron engine")
    p = check_deploy(backend_id, instance_type, model_id, context)
    if p is None or p.tp is None:  # an instance the catalog lacks: kit.config refuses it first
        raise PlanError(f"{instance_type}: the catalog (kit/catalog.py) has no NeuronCore count for it")
    return NeuronCompile(p.tp, catalog.neuron_tp_degrees(instance_type), catalog.neuron_platform(instance_type),
                         NEURON_BATCH_SIZE, context, neuron_prompt_buckets(context))
