"""Does a first boot fit? Checkpoint download, sharding and compile against the readiness window
and the instance's host memory. Pure arithmetic (no Neuron SDK import), unit-tested off-device.

Facts, with sources:
- Host memory and vCPUs per instance type: the Inf2 and Trn1 architecture pages of the Neuron
  docs ("Host Memory (GiB)", aws-neuron/aws-neuron-sdk v2.31.1,
  about-neuron/arch/neuron-hardware/inf2-arch.rst and trn1-arch.rst). inf2.xlarge: 4 vCPUs, 16 GiB.
  On the instance the engine uses the kernel's own figure instead (/proc/meminfo MemTotal, a
  little less than the nominal size: the kernel's reservation is already taken out).
- What compiling holds in host memory: ``compile_memory`` below, each copy a named term with the
  source lines that make it (NxD Inference 2.28 = neuronx-distributed-inference cd3abf3,
  neuronx-distributed 0.17 = aws-neuron/neuronx-distributed 73ab227, the Gemma 4 E2B port =
  neuronx-distributed-inference 6aa6121 contrib/models/gemma-4-E2B/src/modeling_gemma4_e2b.py).
  The compile traces and compiles first, then shards (application_base.py l.302 then l.314), so
  the peak is the largest of three phases, each the sum of what is alive in it.
- A boot whose compiled graphs are already in the cache (the marker the engine writes last,
  matching the configuration's cache key) does not shard or compile: it loads the saved shards.
- The root volume is gp3 (stacks/inference_instance.py); gp3's baseline throughput is 125 MiB/s
  (Amazon EBS volume types), what writing and reading the shards runs at unless raised.

Allowances, not measurements (replace them with a real boot's numbers; the engine logs each
phase): the Hub download rate, the compile time and the compiler's memory per graph, the host
memory the OS and the engine's Python take before any weight is loaded, the kernel's share of a
named type's memory. They are stated, overridable, and printed with the verdict, so a refusal
says which assumption it rests on.

Gemma 4 E2B at the kit's shapes (tp 2, 6 graphs, 0.70 GB KV cache per core; the checkpoint
~10.2 GB with its towers, 9.26 GB of text, a 0.81 GB tied embedding) peaks while converting at
about 24.5 GiB: no inf2.xlarge (MemTotal ~15.2 GiB) compiles it, so the Neuron image compiles on
an inf2.8xlarge (kit/image_facts.py NEURON_BUILD_HOST), and a trn1.2xlarge compiles its own on
its first boot within its 32 GiB.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .neuron_config import ConfigError, Shapes

GIB = 2**30
# instance type -> (vCPUs, host memory GiB); Neuron docs inf2-arch / trn1-arch tables (v2.31.1,
# inf2-arch.rst l.32-50: Inf2.xlarge 1 chip, 4 vCPUs, 16 GiB; Inf2.8xlarge 1 chip, 32 vCPUs, 128 GiB).
HOSTS: dict[str, tuple[int, int]] = {
    "inf2.xlarge": (4, 16), "inf2.8xlarge": (32, 128), "inf2.24xlarge": (96, 384), "inf2.48xlarge": (192, 768),
    "trn1.2xlarge": (8, 32), "trn1.32xlarge": (128, 512), "trn1n.32xlarge": (128, 512),
}
GP3_BASELINE_BYTES_S = 125 * 2**20  # Amazon EBS gp3 baseline throughput
# The port's converter drops these towers (convert_hf_to_neuron_state_dict, l.1712-1720 at 6aa6121)
# after stripping these prefixes (l.1703-1710); what is left is the text model it clones.
_SKIPPED = ("vision_tower.", "multi_modal_projector.", "embed_vision", "audio_tower.", "embed_audio")
_PREFIXES = ("language_model.model.", "language_model.", "model.language_model.model.", "model.language_model.")


@dataclass(frozen=True)
class Allowances:
    download_bytes_s: float = 100e6  # Hugging Face Hub to one instance; not measured here
    compile_s_per_graph: float = 300.0  # one bucket graph of the port on a 4-vCPU host; not measured
    host_baseline_bytes: int = GIB  # agents and the engine's Python with torch imported (not the kernel)
    disk_bytes_s: float = GP3_BASELINE_BYTES_S
    # One neuronx-cc process compiling one bucket graph (NxD compiles them side by side, below);
    # not measured here.
    compiler_bytes_per_graph: int = GIB
    # What the kernel keeps of a named type's nominal memory (not in MemTotal): an inf2.xlarge's
    # MemTotal of 15,896,060 kB, the figure the review of this budget used, is 5.25% under 16 GiB.
    # Only for a named type: on the instance the engine reads MemTotal itself.
    kernel_reserved_fraction: float = 0.06


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint's bytes as the compile holds them."""

    total: int  # every *.safetensors tensor: NxD Inference loads them all
    text: int  # the tensors the port's converter keeps (and clones): the vision and audio towers dropped
    tied_embedding: int = 0  # embed_tokens.weight when tied to the output head (cloned twice), else 0

    @classmethod
    def upper_bound(cls, total: int) -> "Checkpoint":
        """Only the size on disk known: every tensor counted as text."""
        return cls(total, total, 0)


def read_checkpoint(model_dir: str, tied: bool = True) -> Checkpoint | None:
    """The sizes from the safetensors headers (an 8-byte little-endian length, then a JSON map of
    tensor name -> dtype, shape, data_offsets; huggingface/safetensors README, "Format"), classified
    as the port's converter does. None when a file is missing or unreadable."""
    import glob
    import json
    import os
    import struct

    total = text = embed = 0
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not files:
        return None
    try:
        for path in files:
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                size = meta["data_offsets"][1] - meta["data_offsets"][0]
                total += size
                key = next((name[len(p):] for p in _PREFIXES if name.startswith(p)), name)
                if any(s in key for s in _SKIPPED):
                    continue
                text += size
                if key == "embed_tokens.weight":
                    embed = size
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        return None
    return Checkpoint(total, text, embed if tied else 0)


@dataclass(frozen=True)
class CompileMemory:
    """Host memory of a compiling boot, term by term (bytes), and its phases. Sources, at the
    commits named in the module docstring:

    - ``checkpoint``: the raw state dict, every safetensors file of the directory, the towers the
      port does not use included (application_base.py get_state_dict l.694 -> modules/checkpoint.py
      load_state_dict).
    - ``converter_clones``: the port's converter copies every text tensor into a new dict
      (``new_state_dict[new_key] = weight.detach().clone()``, modeling_gemma4_e2b.py l.1753) while
      the raw dict is still referenced; get_state_dict drops it only when the converter returns
      (application_base.py l.728).
    - ``tied_clones``: the tied embedding cloned twice, for ``lm_head.weight`` and
      ``lm_head.linear.weight`` (update_state_dict_for_tied_weights, l.1817-1821; called at
      application_base.py l.730), after the raw dict is gone.
    - ``rank_shard``: each rank's shard: NxD keeps every rank's sharded dict
      (model_builder.py l.837-838, ``sharded_checkpoints.append``) and copies one rank's tensors
      contiguous for ``save_file`` (l.979-984). The kept dicts mostly view the converted
      checkpoint's storage (trace.py create_local_weight, l.678-686, returns a split of it); the
      contiguous copy of one rank, (text + tied embedding) / tp, is counted.
    - ``traced_module``: one rank's model, weights and KV cache as real CPU tensors, built for
      tracing (model_builder.py _generate_hlo l.860 -> NxD Inference DecoderModelInstance.load_module,
      model_wrapper.py l.1454-1531, kept as ``self.module``). One per submodel (context encoding
      and token generation) while tracing; sharding rebuilds only the first one on the meta device
      (model_builder.py l.813-824), so one stays alive to the end: (text + tied embedding) / tp
      (the output head is its own parameter there) plus the KV cache.
    - ``compiler``: neuronx-cc per bucket graph, all at once: NxD submits every graph to a
      ``ThreadPoolExecutor()`` (model_builder.py l.710), whose default is min(32, CPUs + 4) workers
      (Python docs, concurrent.futures), more than the kit's graphs on any Neuron host.
    - ``baseline``: the OS services and the engine's Python (an allowance).

    Phases: tracing and compiling (two traced modules and the compilers), converting (the raw
    checkpoint, its clones and the kept module), sharding (the clones, the tied clones, one rank's
    contiguous shard and the kept module). The peak is the largest, plus the baseline."""

    checkpoint: int
    converter_clones: int
    tied_clones: int
    rank_shard: int
    traced_module: int
    compiler: int
    baseline: int

    @property
    def phases(self) -> dict[str, int]:
        return {
            "compiling": 2 * self.traced_module + self.compiler,
            "converting": self.checkpoint + self.converter_clones + self.traced_module,
            "sharding": self.converter_clones + self.tied_clones + self.rank_shard + self.traced_module,
        }

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def peak(self) -> int:
        return self.phases[self.peak_phase] + self.baseline

    def terms(self) -> str:
        """The peak phase's terms, for the one-line verdict."""
        names = {"compiling": ("traced_module", "traced_module", "compiler"),
                 "converting": ("checkpoint", "converter_clones", "traced_module"),
                 "sharding": ("converter_clones", "tied_clones", "rank_shard", "traced_module")}[self.peak_phase]
        parts = [f"{n.replace('_', ' ')} {getattr(self, n) / GIB:.1f}" for n in (*names, "baseline")]
        return f"peak while {self.peak_phase}: {' + '.join(parts)} GiB"


def compile_memory(checkpoint: Checkpoint, tp_degree: int, kv_bytes: int, graphs: int, vcpus: int | None,
                   allow: Allowances = Allowances()) -> CompileMemory:
    workers = min(32, vcpus + 4) if vcpus else graphs
    per_rank = math.ceil((checkpoint.text + checkpoint.tied_embedding) / tp_degree)
    return CompileMemory(
        checkpoint=checkpoint.total, converter_clones=checkpoint.text, tied_clones=2 * checkpoint.tied_embedding,
        rank_shard=per_rank, traced_module=per_rank + kv_bytes,
        compiler=min(graphs, workers) * allow.compiler_bytes_per_graph, baseline=allow.host_baseline_bytes)


@dataclass(frozen=True)
class BootBudget:
    host: str  # instance type, or 'this host'
    host_bytes: int  # usable: MemTotal on the instance, the nominal less the kernel's share for a type
    host_need_bytes: int  # peak host memory on this boot, as modelled
    download_s: float
    shard_s: float
    compile_s: float
    load_s: float
    window_s: float | None
    cached: bool
    memory: CompileMemory | None = None  # the compile's terms (None on a cached boot)

    @property
    def total_s(self) -> float:
        return self.download_s + self.shard_s + self.compile_s + self.load_s

    @property
    def margin_bytes(self) -> int:
        return self.host_bytes - self.host_need_bytes

    def line(self) -> str:
        """The arithmetic in one line, for the engine's log and its refusal."""
        time = (f"download {self.download_s:.0f} s + shard {self.shard_s:.0f} s + compile {self.compile_s:.0f} s"
                f" + load {self.load_s:.0f} s = {self.total_s:.0f} s")
        window = f" of the {self.window_s:.0f} s readiness window" if self.window_s else ""
        cache = " (compiled graphs cached: no shard, no compile)" if self.cached else ""
        terms = f" ({self.memory.terms()})" if self.memory else ""
        return (f"{self.host}: host memory >= {self.host_need_bytes / GIB:.1f} GiB{terms} of "
                f"{self.host_bytes / GIB:.1f} GiB, margin {self.margin_bytes / GIB:.1f} GiB; {time}{window}{cache}")


def graph_count(shapes: Shapes) -> int:
    """Context-encoding graphs (one per prompt bucket) plus token-generation graphs (one per KV bucket)."""
    return len(shapes.prompt_buckets) + len(shapes.token_buckets)


def nominal_host_bytes(instance_type: str) -> int:
    if instance_type not in HOSTS:
        raise ConfigError(f"no host memory figure for {instance_type!r}; known: {', '.join(HOSTS)}")
    return HOSTS[instance_type][1] * GIB


def host_memory_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """This host's MemTotal, or None where there is no /proc/meminfo."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def boot_budget(checkpoint: int | Checkpoint, tp_degree: int, shapes: Shapes, host: str | int,
                window_s: float | None = None, cached: bool = False,
                allow: Allowances = Allowances(), kv_bytes: int = 0, vcpus: int | None = None) -> BootBudget:
    """``host``: an instance type (its nominal memory less the kernel's share, its vCPUs) or this
    host's MemTotal in bytes (``vcpus``: its CPU count, if known). ``checkpoint``: its sizes, or
    just its bytes on disk (then all counted as text). ``kv_bytes``: the KV cache of one rank
    (neuron_config.kv_cache_bytes)."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint.upper_bound(int(checkpoint))
    if ckpt.total <= 0 or tp_degree < 1:
        raise ConfigError(f"checkpoint of {ckpt.total} bytes over tp degree {tp_degree}: both must be positive")
    if isinstance(host, str):
        label = host
        vcpus = HOSTS[host][0] if host in HOSTS else vcpus
        host = int(nominal_host_bytes(host) * (1 - allow.kernel_reserved_fraction))
    else:
        label = "this host"
    if cached:
        # The graphs and the checkpoint sit on the same root volume (stop/start keeps both; an
        # image built with them carries both): no download, no shard, no compile. Loading reads
        # each local rank's saved shard: the checkpoint's bytes, once.
        memory = None
        need = ckpt.total + allow.host_baseline_bytes
        download_s = shard_s = compile_s = 0.0
    else:
        memory = compile_memory(ckpt, tp_degree, kv_bytes, graph_count(shapes), vcpus, allow)
        need = memory.peak
        download_s = ckpt.total / allow.download_bytes_s
        shard_s = ckpt.total / allow.disk_bytes_s  # every rank's shard written once
        compile_s = graph_count(shapes) * allow.compile_s_per_graph
    return BootBudget(label, host, need, download_s, shard_s, compile_s,
                      ckpt.total / allow.disk_bytes_s, window_s, cached, memory)


def check_boot_budget(budget: BootBudget) -> BootBudget:
    """Refuse, in one line, a boot that cannot fit the host memory or the readiness window."""
    if budget.host_need_bytes > budget.host_bytes:
        raise ConfigError(f"does not fit: {budget.line()}; compile on an instance with more host "
                          f"memory and reuse the graphs (the Neuron image compiles on inf2.8xlarge: "
                          f"docs/images.md, 'Neuron boot budget'), or lower the checkpoint size")
    if budget.window_s is not None and budget.total_s > budget.window_s:
        raise ConfigError(f"does not fit: {budget.line()}; fewer --prompt-buckets/--token-buckets, "
                          f"or a longer readiness window")
    return budget
