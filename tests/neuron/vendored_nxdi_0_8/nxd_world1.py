"""neuronx-distributed at world size 1, for running NxD Inference 0.8 models on CPU here.

NxD Inference 0.8 has a CPU mode of its own (``NeuronApplicationBase.to_cpu``,
models/application_base.py l.554 at cd3abf3: ``NXD_CPU_MODE=1``, a gloo process group of world
size 1, ``initialize_model_parallel(..., skip_collective_init=True)``, ``get_sharded_checkpoint``
then ``load_state_dict``), and the model code runs on CPU through it: the KV-cache writes take
their ``cpu_mode()`` branches (modules/kvcache/utils.py l.41, l.65), attention its decomposed path.
What it needs from neuronx-distributed (0.17.26814, SDK 2.28; source aws-neuron/neuronx-distributed
tag v2.28.0, 22cadad) is not installable here: that package is on the Neuron pip repository only
(PyPI's ``neuronx-distributed`` is a 0.1 placeholder) and imports torch_xla at module level
(``neuronx_distributed/utils/__init__.py`` l.3). So this module stands in for exactly the parts
of it that NxD Inference and the port call while loading and running a model, each at its real
signature and with its world-size-1 behaviour read from that tag:

- ``utils.cpu_mode`` (utils/__init__.py l.6): ``NXD_CPU_MODE`` > 0.
- ``parallel_layers.parallel_state``: sizes 1, rank 0, groups of one process (the real module
  returns torch.distributed groups; at world size 1 every collective is the identity).
- ``parallel_layers.layers``: ``ColumnParallelLinear``/``RowParallelLinear`` (l.562, l.816) are a
  linear layer whose one partition is the whole weight (``pad=True`` pads to a multiple of the
  world size, 1: no padding); ``ParallelEmbedding`` (l.187) an embedding; ``SPMDRank`` (l.1549) a
  parameter holding rank 0.
- ``parallel_layers.mappings``: every scatter/gather/reduce over a group of one is the identity
  (mappings.py ``_reduce``: "Bypass the function if we are using only 1 GPU").
- ``parallel_layers.utils``/``pad``: ``divide``, ``get_padding_length``, ``set_tensor_model_parallel_
  attributes``, ``get_number_of_extra_heads`` as written there.
- ``trace.trace.get_sharded_checkpoint`` (trace.py l.646): ``preprocess_checkpoint`` (each module's
  ``preshard_hook``, then drop keys the model lacks) and, at one rank, no split.
- ``utils.model_utils.init_on_device``: a context manager that builds on the given device.

Everything else under neuronx_distributed stays an import-only stub (neuron_stubs.py): reaching it
at run time would return a stub object and the comparison against transformers would fail.
One piece of torch_neuronx is reached: the port normalizes with NxDI's ``CustomRMSNorm``
(modules/custom_calls.py l.15), which calls the custom op ``torch_neuronx.xla_impl.ops.RmsNorm``
("AwsNeuronRmsNorm") and has no CPU branch; NxDI's own models switch to a Python RMSNorm on CPU
("CustomRMSNorm does not work on CPU", models/llama/modeling_llama.py l.139 at cd3abf3), the E2B
port does not. ``RmsNorm.apply(x, weight, eps, dim)`` is stood in by RMS normalization over
``dim`` times the weight, in float32 (the module casts its input to float32 before the call).
The rest of torch_neuronx, neuronxcc (NKI), torch_xla and libneuronxla are never run on this path
(attention kernels are off in the kit's configuration, ``attn_kernel_enabled`` False) and stay
import-only stubs that raise if reached (neuron_stubs.STRICT).
"""
from __future__ import annotations

import contextlib
import os
import sys
import types
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import neuron_stubs


class _Group:
    """A process group of one (what torch.distributed.new_group returns, as far as NxDI asks)."""

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


_GROUP = _Group()
_STATE = {"initialized": False}


# -- parallel_state ---------------------------------------------------------------------------
def initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                              expert_model_parallel_size=1, skip_collective_init=False, **_):
    sizes = (tensor_model_parallel_size, pipeline_model_parallel_size, expert_model_parallel_size)
    if any(s != 1 for s in sizes):
        raise ValueError(f"this stand-in is world size 1 only, got tp/pp/ep {sizes}")
    _STATE["initialized"] = True


def model_parallel_is_initialized() -> bool:
    return _STATE["initialized"]


def _one(*_a, **_k) -> int:
    return 1


def _zero(*_a, **_k) -> int:
    return 0


def _group(*_a, **_k) -> _Group:
    return _GROUP


# -- layers -------------------------------------------------------------------------------------
def set_tensor_model_parallel_attributes(tensor, is_parallel, dim, stride, num_partitions=-1, rank_ordering=None):
    tensor.tensor_model_parallel = is_parallel
    tensor.partition_dim = dim
    tensor.partition_stride = stride
    tensor.num_partitions = num_partitions
    tensor.rank_ordering = rank_ordering


def divide(numerator: int, denominator: int) -> int:
    if numerator % denominator != 0:
        raise ValueError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator


def get_padding_length(size: int, world_size: int) -> int:
    return (world_size - size % world_size) % world_size


def get_number_of_extra_heads(num_heads: int, tp_degree: int) -> int:
    return (tp_degree - num_heads % tp_degree) % tp_degree


class BaseParallelLayer(nn.Module):
    def __init__(self, device=None):
        super().__init__()


class BaseParallelLinear(BaseParallelLayer):
    pass


class ColumnParallelLinear(BaseParallelLinear):
    def __init__(self, input_size, output_size, bias=True, gather_output=True, dtype=torch.float32, device=None,
                 stride=1, init_method=None, sequence_parallel_enabled=False, sequence_dimension=None,
                 keep_master_weight=False, skip_bias_add=False, pad=False, pad_alignment_size_per_rank=1,
                 keep_padded_output=False, tensor_model_parallel_group=None, reduce_dtype=torch.float32,
                 rank_ordering=None):
        super().__init__(device)
        self.input_size, self.output_size = input_size, output_size
        self.gather_output, self.skip_bias_add = gather_output, skip_bias_add
        self.tensor_parallel_group = tensor_model_parallel_group or _GROUP
        self.pad_size = 0
        self.weight = nn.Parameter(torch.empty(output_size, input_size, dtype=dtype), requires_grad=False)
        set_tensor_model_parallel_attributes(self.weight, True, 0, stride, 1)
        self.bias = nn.Parameter(torch.zeros(output_size, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, input, slice_indices=None):
        out = F.linear(input, self.weight, None if self.skip_bias_add else self.bias)
        return (out, self.bias) if self.skip_bias_add else out


class RowParallelLinear(BaseParallelLinear):
    def __init__(self, input_size, output_size, bias=True, input_is_parallel=False, dtype=torch.float32,
                 device=None, stride=1, init_method=None, sequence_parallel_enabled=False,
                 sequence_dimension=None, keep_master_weight=False, skip_bias_add=False, pad=False,
                 reduce_output=True, tensor_model_parallel_group=None, reduce_dtype=torch.float32,
                 tile_cc=False, rank_ordering=None):
        super().__init__(device)
        self.input_size, self.output_size = input_size, output_size
        self.skip_bias_add, self.reduce_output = skip_bias_add, reduce_output
        self.tensor_parallel_group = tensor_model_parallel_group or _GROUP
        self.weight = nn.Parameter(torch.empty(output_size, input_size, dtype=dtype), requires_grad=False)
        set_tensor_model_parallel_attributes(self.weight, True, 1, stride, 1)
        self.bias = nn.Parameter(torch.zeros(output_size, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, input_, slice_indices=None):
        out = F.linear(input_, self.weight, None if self.skip_bias_add else self.bias)
        return (out, self.bias) if self.skip_bias_add else out


class ParallelEmbedding(BaseParallelLayer):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, init_method=nn.init.normal_, device=None,
                 dtype=torch.float32, shard_across_embedding=False, pad=False, sequence_parallel_enabled=False,
                 tensor_model_parallel_group=None, use_spmd_rank=False, sequence_dimension=None, tile_cc=False,
                 rank_ordering=None, collect_output=True):
        super().__init__(device)
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.tensor_parallel_group = tensor_model_parallel_group or _GROUP
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=False)
        set_tensor_model_parallel_attributes(self.weight, True, 1 if shard_across_embedding else 0, 1, 1)

    def forward(self, input_):
        return F.embedding(input_.long(), self.weight, self.padding_idx)


class SPMDRank(nn.Module):
    def __init__(self, world_size: int, tensor_model_parallel_size=None):
        super().__init__()
        self.world_size = world_size
        self.tensor_model_parallel_size = tensor_model_parallel_size or 1
        self.rank = nn.Parameter(torch.zeros(1, dtype=torch.int32), requires_grad=False)

    def get_rank(self) -> torch.Tensor:
        return self.rank


# -- mappings: a group of one ----------------------------------------------------------------------
def _identity(input_, *_a, **_k):
    return input_


MAPPINGS = ("_gather_along_dim", "_reduce_scatter_along_dim", "_traced_spmd_tiled_rs", "_traced_tiled_rs",
            "gather_from_sequence_parallel_region", "reduce_from_tensor_model_parallel_region",
            "reduce_scatter_to_sequence_parallel_region", "gather_from_tensor_model_parallel_region_with_dim",
            "reduce_scatter_to_tensor_model_parallel_region_with_dim", "gather_from_tensor_model_parallel_region",
            "scatter_to_sequence_parallel_region", "copy_to_tensor_model_parallel_region",
            "scatter_to_tensor_model_parallel_region", "_gather_along_first_dim", "_reduce")


# -- trace -------------------------------------------------------------------------------------------
def _invoke_preshard_hook(module, checkpoint, prefix):
    # trace.py invoke_preshard_hook (l.717): a module with the hook handles its subtree.
    if module is None:
        return
    if hasattr(module, "preshard_hook"):
        module.preshard_hook(checkpoint, prefix + "weight")
        if getattr(module, "add_bias", False):
            module.preshard_hook(checkpoint, prefix + "bias")
        return
    for name, child in module._modules.items():
        if child is not None:
            _invoke_preshard_hook(child, checkpoint, prefix + name + ".")


def get_sharded_checkpoint(checkpoint, model, rank, tp_degree, is_cached=False):
    if tp_degree != 1 or rank != 0:
        raise ValueError(f"this stand-in shards for one rank only, got rank {rank} of {tp_degree}")
    if not is_cached:
        _invoke_preshard_hook(model, checkpoint, "")
        names = model.state_dict()
        for key in [k for k in checkpoint if k not in names]:
            checkpoint.pop(key)


@contextlib.contextmanager
def init_on_device(device, force_custom_init_on_device=False):
    with torch.device(device):
        yield


class RmsNorm:
    """torch_neuronx.xla_impl.ops.RmsNorm, the AwsNeuronRmsNorm custom call, on CPU."""

    @staticmethod
    def apply(hidden_states, weight, eps, dim):
        x = hidden_states.float()
        return x * torch.rsqrt(x.pow(2).mean(dim, keepdim=True) + eps) * weight.float()


def cpu_mode() -> bool:
    return int(os.environ.get("NXD_CPU_MODE", "0")) > 0


def install() -> None:
    """Register the stand-ins; every other neuronx_distributed name stays an import-only stub."""
    neuron_stubs.install()

    def module(name: str, **attrs) -> types.ModuleType:
        mod = sys.modules.get(name)
        if mod is None:
            mod = neuron_stubs._StubModule(name)
            mod.__path__ = []
            sys.modules[name] = mod
        for key, value in attrs.items():
            setattr(mod, key, value)
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(module(parent), leaf, mod)
        return mod

    module("torch_neuronx.xla_impl.ops", RmsNorm=RmsNorm)
    module("neuronx_distributed.utils", cpu_mode=cpu_mode)
    module("neuronx_distributed.utils.model_utils", init_on_device=init_on_device)
    state = module("neuronx_distributed.parallel_layers.parallel_state",
                   initialize_model_parallel=initialize_model_parallel,
                   model_parallel_is_initialized=model_parallel_is_initialized)
    for name in ("get_tensor_model_parallel_size", "get_world_group_size", "get_pipeline_model_parallel_size",
                 "get_expert_model_parallel_size", "get_data_parallel_size", "get_kv_shared_group_size"):
        setattr(state, name, _one)
    for name in ("get_tensor_model_parallel_rank", "get_pipeline_model_parallel_rank", "get_data_parallel_rank",
                 "get_expert_model_parallel_rank"):
        setattr(state, name, _zero)
    for name in ("get_tensor_model_parallel_group", "get_kv_shared_group", "get_world_group",
                 "get_data_parallel_group", "get_expert_model_parallel_group"):
        setattr(state, name, _group)
    utils = module("neuronx_distributed.parallel_layers.utils", divide=divide, get_padding_length=get_padding_length,
                   set_tensor_model_parallel_attributes=set_tensor_model_parallel_attributes)
    module("neuronx_distributed.parallel_layers.pad", get_number_of_extra_heads=get_number_of_extra_heads)
    module("neuronx_distributed.parallel_layers.mappings", **{name: _identity for name in MAPPINGS})
    layers = module("neuronx_distributed.parallel_layers.layers", ColumnParallelLinear=ColumnParallelLinear,
                    RowParallelLinear=RowParallelLinear, ParallelEmbedding=ParallelEmbedding, SPMDRank=SPMDRank,
                    BaseParallelLinear=BaseParallelLinear, BaseParallelLayer=BaseParallelLayer)
    module("neuronx_distributed.parallel_layers", ColumnParallelLinear=ColumnParallelLinear,
           RowParallelLinear=RowParallelLinear, ParallelEmbedding=ParallelEmbedding, parallel_state=state,
           utils=utils, layers=layers, initialize_model_parallel=initialize_model_parallel)
    module("neuronx_distributed.trace.trace", get_sharded_checkpoint=get_sharded_checkpoint)
    warnings.filterwarnings("ignore", message="Removing redundant keys")
