"""Does a first boot fit? Checkpoint download, sharding and compile against the readiness window
and the instance's host memory. Pure arithmetic (no Neuron SDK import), unit-tested off-device.

Facts, with sources:
- Host memory and vCPUs per instance type: the Inf2 and Trn1 architecture pages of the Neuron
  docs ("Host Memory (GiB)", aws-neuron/aws-neuron-sdk v2.31.1,
  about-neuron/arch/neuron-hardware/inf2-arch.rst and trn1-arch.rst). inf2.xlarge: 4 vCPUs, 16 GiB.
  On the instance the engine uses the kernel's own figure instead (/proc/meminfo MemTotal, a
  little less than the nominal size: the kernel's reservation is already taken out).
- What compiling holds in host memory: NxD Inference's ``compile`` with
  ``save_sharded_checkpoint`` (what the engine sets) loads the whole checkpoint into host memory
  (``get_state_dict`` -> ``modules/checkpoint.load_state_dict``, every safetensors file of the
  directory, vision and audio towers included) and builds each rank's shard from it
  (``shard_weights`` -> ``shard_checkpoint``), neuronx-distributed-inference c63afe0,
  models/application_base.py. Lower bound: the checkpoint plus one rank's shard.
- A boot whose compiled graphs are already in the cache (the marker the engine writes last,
  matching the configuration's cache key) does not shard or compile: it loads the saved shards.
- The root volume is gp3 (stacks/inference_instance.py); gp3's baseline throughput is 125 MiB/s
  (Amazon EBS volume types), what writing and reading the shards runs at unless raised.

Allowances, not measurements (replace them with a real boot's numbers; the engine logs each
phase): the Hub download rate, the compile time per graph, the host memory the OS and the
engine's Python take before any weight is loaded. They are stated, overridable, and printed
with the verdict, so a refusal says which assumption it rests on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .neuron_config import ConfigError, Shapes

GIB = 2**30
# instance type -> (vCPUs, host memory GiB); Neuron docs inf2-arch / trn1-arch tables (v2.31.1).
HOSTS: dict[str, tuple[int, int]] = {
    "inf2.xlarge": (4, 16), "inf2.8xlarge": (32, 128), "inf2.24xlarge": (96, 384), "inf2.48xlarge": (192, 768),
    "trn1.2xlarge": (8, 32), "trn1.32xlarge": (128, 512), "trn1n.32xlarge": (128, 512),
}
GP3_BASELINE_BYTES_S = 125 * 2**20  # Amazon EBS gp3 baseline throughput


@dataclass(frozen=True)
class Allowances:
    download_bytes_s: float = 100e6  # Hugging Face Hub to one instance; not measured here
    compile_s_per_graph: float = 300.0  # one bucket graph of the port on a 4-vCPU host; not measured
    host_baseline_bytes: int = GIB  # agents and the engine's Python with torch imported (not the kernel)
    disk_bytes_s: float = GP3_BASELINE_BYTES_S


@dataclass(frozen=True)
class BootBudget:
    host: str  # instance type, or 'this host'
    host_bytes: int
    host_need_bytes: int  # lower bound of peak host memory on this boot
    download_s: float
    shard_s: float
    compile_s: float
    load_s: float
    window_s: float | None
    cached: bool

    @property
    def total_s(self) -> float:
        return self.download_s + self.shard_s + self.compile_s + self.load_s

    def line(self) -> str:
        """The arithmetic in one line, for the engine's log and its refusal."""
        time = (f"download {self.download_s:.0f} s + shard {self.shard_s:.0f} s + compile {self.compile_s:.0f} s"
                f" + load {self.load_s:.0f} s = {self.total_s:.0f} s")
        window = f" of the {self.window_s:.0f} s readiness window" if self.window_s else ""
        cache = " (compiled graphs cached: no shard, no compile)" if self.cached else ""
        return (f"{self.host}: host memory >= {self.host_need_bytes / GIB:.1f} GiB of "
                f"{self.host_bytes / GIB:.1f} GiB; {time}{window}{cache}")


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


def boot_budget(checkpoint_bytes: int, tp_degree: int, shapes: Shapes, host: str | int,
                window_s: float | None = None, cached: bool = False,
                allow: Allowances = Allowances()) -> BootBudget:
    """``host``: an instance type (its nominal memory) or this host's memory in bytes."""
    if checkpoint_bytes <= 0 or tp_degree < 1:
        raise ConfigError(f"checkpoint of {checkpoint_bytes} bytes over tp degree {tp_degree}: both must be positive")
    if isinstance(host, str):
        label, host = host, nominal_host_bytes(host)
    else:
        label = "this host"
    shard = math.ceil(checkpoint_bytes / tp_degree)
    if cached:
        # The graphs and the checkpoint sit on the same root volume (stop/start keeps both; an
        # image built with them carries both): no download, no shard, no compile. Loading reads
        # each local rank's saved shard: the checkpoint's bytes, once.
        need = checkpoint_bytes + allow.host_baseline_bytes
        download_s = shard_s = compile_s = 0.0
    else:
        need = checkpoint_bytes + shard + allow.host_baseline_bytes
        download_s = checkpoint_bytes / allow.download_bytes_s
        shard_s = checkpoint_bytes / allow.disk_bytes_s  # every rank's shard written once
        compile_s = graph_count(shapes) * allow.compile_s_per_graph
    return BootBudget(label, host, need, download_s, shard_s, compile_s,
                      checkpoint_bytes / allow.disk_bytes_s, window_s, cached)


def check_boot_budget(budget: BootBudget) -> BootBudget:
    """Refuse, in one line, a boot that cannot fit the host memory or the readiness window."""
    if budget.host_need_bytes > budget.host_bytes:
        raise ConfigError(f"does not fit: {budget.line()}; compile on an instance with more host "
                          f"memory and reuse the graphs (docs/images.md, 'Neuron boot budget'), "
                          f"or lower the checkpoint size")
    if budget.window_s is not None and budget.total_s > budget.window_s:
        raise ConfigError(f"does not fit: {budget.line()}; fewer --prompt-buckets/--token-buckets, "
                          f"or a longer readiness window")
    return budget
