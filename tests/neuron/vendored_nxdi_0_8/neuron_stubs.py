"""Stand-ins for the Neuron-only packages NxD Inference imports, at the import boundary only.

torch_neuronx, neuronx_distributed, neuronxcc (NKI), torch_xla and libneuronxla exist only on the
Neuron pip repository and need a Neuron device; NxD Inference's own source (vendored beside this
file from the 0.8 release commit) is loaded for real. Any module under those top-level names
imports as an empty stub whose attributes are stub classes: they can be subclassed, called,
used as decorators and read as enum members, so NxD Inference's module-level code runs. No
behaviour is faked: a test that needs a Neuron function's result cannot get it from here.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# Set once a model is built (nxd_world1 does, before running it): from then on, creating or calling a
# stub raises, naming it, so a Neuron-only function reached at run time fails loudly.
STRICT = {"on": False}
NEURON_ONLY = ("torch_neuronx", "neuronx_distributed", "neuronxcc", "torch_xla", "libneuronxla", "nki")


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")

    def __iter__(cls):
        return iter(())

    def __getitem__(cls, item):  # type annotations: nt.tensor[nt.mutable]
        return cls

    def __or__(cls, other):  # annotations: X | None
        return cls

    __ror__ = __or__


class _Stub(metaclass=_StubMeta):
    def __init__(self, *args, **kwargs):
        if STRICT["on"]:
            raise NotImplementedError(f"Neuron-only {type(self).__qualname__} reached at run time")
        self._args = args

    def __call__(self, *args, **kwargs):
        if STRICT["on"]:
            raise NotImplementedError(f"Neuron-only {type(self).__qualname__}(...) called at run time")
        # A decorator applied with arguments (@nki.jit(mode=...)) returns the function it wraps.
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Stub()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub()


def _stub_class(name: str) -> type:
    return _StubMeta(name.rsplit(".", 1)[-1], (_Stub,), {"__qualname__": name, "__module__": "neuron_stubs"})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in NEURON_ONLY:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
