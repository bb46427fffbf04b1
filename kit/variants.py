"""Variants: one backend deployed once more per precision, side by side ("precisions are deployments").

``-c g6_variants=bf16=google/gemma-4-E2B-it,emb4=package:emb4,int8=package:int8`` (or in cdk.json
``"g6_variants": {"bf16": "google/gemma-4-E2B-it", ...}``) adds one stack per variant next to the
backend's own: ``G6Stack-bf16``, ``G6Stack-emb4``, ``G6Stack-int8``, each with its own instance
(or SageMaker endpoint), guardrails and outputs, sharing the region's NetworkStack. The harness
calls them ``g6@bf16`` ... and labels them with their model id and scheme.

Grammar: ``NAME=[MODEL][@INSTANCE_TYPE]`` items, comma-separated. NAME is 1-16 lowercase letters,
digits and ``-`` (it ends a CloudFormation stack name, whose characters are ``[A-Za-z0-9-]``:
CloudFormation CreateStack API reference, StackName), unique per backend. MODEL is what
``<id>_model`` takes (a Hugging Face id, or ``package[:scheme]``) and is checked the same way
(kit/config.py); left out, the variant serves the backend's own model. ``@INSTANCE_TYPE`` puts the
variant on another instance type, checked as ``<id>_instance_type`` is (the catalog's instance
rules; the planner's fit for the model at synth, stacks/sizing.py); left out, the backend's. No
model id or instance type contains ``@`` (Hugging Face ids are letters, digits, ``-_./``; a package
is ``package:<scheme>``; Bedrock ids take no variants), so the last ``@`` splits an item without
ambiguity. The EC2 twins of the SageMaker GPU-family sweep are then
``g6_variants=g5=@g5.xlarge,g6e=@g6e.xlarge,g7e=@g7e.2xlarge``: ``G6Stack-g5`` ..., ``g6@g5`` ...
Which backends take variants is a catalog fact (``open_weights``: a self-hosted backend whose model
is configuration); at most ``MAX_PER_BACKEND`` per backend, and for an EC2 backend no more than its
catalog row declares subnet blocks for (each variant owns one: kit/subnets.py; kit.config checks).

Plain Python (no aws-cdk-lib): kit/config.py, discovery and the report all read this.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

from kit import catalog
from kit.errors import KitError

SEP = "@"  # harness name: <backend id>@<variant>; --endpoint names cannot hold "@" (discovery._NAME)
INSTANCE_SEP = "@"  # in an item: NAME=MODEL@INSTANCE_TYPE ("model at instance"; see Grammar above)
NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,14}[a-z0-9])?$")
MAX_PER_BACKEND = 3
# The Variant output of a backend's own stack (stacks/outputs.py) is not emitted; a Scheme output
# whose model's scheme is not known says so in this word.
UNKNOWN_SCHEME = "unknown"

# Schemes of the catalog's own default models (kit/catalog.py DEFAULT_MODEL: GEMMA_E2B is the
# bf16 release, GEMMA_E2B_INT4 Google's QAT int4 weights in compressed-tensors w4a16); a package
# id names its scheme itself (kit/schemes.py). Nothing is guessed from other ids.
KNOWN_SCHEMES: dict[str, str] = {catalog.GEMMA_E2B: "bf16", catalog.GEMMA_E2B_INT4: "w4a16"}
# The roofline precision (harness/cost/roofline.py) of a known scheme that is not a package
# (precision_of).
SCHEME_PRECISION: dict[str, str] = {"bf16": "bf16", "w4a16": "int4"}


class VariantError(KitError, ValueError):
    """A ``<id>_variants`` value is malformed. str(e) is the one line to show."""


def key(backend_id: str) -> str:
    return f"{backend_id}_variants"


def backends_with_variants() -> tuple[str, ...]:
    """The catalog backends that take ``<id>_variants``: those whose model is configuration."""
    return tuple(b.id for b in catalog.BACKENDS.values() if b.open_weights)


class Item(NamedTuple):
    """One ``<id>_variants`` item: its name, its model ("" = the backend's) and its instance type
    (None = the backend's)."""

    name: str
    model: str
    instance_type: str | None = None


def _item(k: str, name: str, spec: Any, example: str) -> Item:
    """``MODEL``, ``MODEL@TYPE`` or ``@TYPE`` -> Item; grammar only (values are checked by kit.config)."""
    if not isinstance(spec, str):
        raise VariantError(f"{k}: variant {name!r} is {spec!r}, not MODEL, MODEL@INSTANCE_TYPE or @INSTANCE_TYPE; "
                           f"e.g. {example}")
    model, at, itype = spec.strip().rpartition(INSTANCE_SEP)
    model, itype = (model.strip(), itype.strip()) if at else (itype.strip(), "")
    if INSTANCE_SEP in model:
        raise VariantError(f"{k}: variant {name!r} = {spec!r} has more than one {INSTANCE_SEP!r}; "
                           f"one MODEL@INSTANCE_TYPE, e.g. {example}")
    if at and not itype:
        raise VariantError(f"{k}: variant {name!r} = {spec!r} names no instance type after {INSTANCE_SEP!r}; "
                           f"e.g. {example}")
    if not model and not itype:
        raise VariantError(f"{k}: variant {name!r} has no model and no instance type; e.g. {example}")
    return Item(name, model, itype or None)


def parse(backend_id: str, value: Any) -> tuple[Item, ...]:
    """``"a=M1,b=M2@g5.xlarge,c=@g6e.xlarge"`` or ``{"a": "M1", "c": "@g6e.xlarge"}`` -> Items in
    the order given. Checks the grammar, the names (unique, count); the models and instance types
    are checked by the caller like ``<id>_model`` and ``<id>_instance_type``."""
    k = key(backend_id)
    example = f"{k}=bf16={catalog.GEMMA_E2B},int8=package:int8,g5=@g5.xlarge"
    if isinstance(value, Mapping):
        pairs = [(str(n), m) for n, m in value.items()]
    elif isinstance(value, str):
        pairs = []
        for part in value.split(","):
            name, sep, spec = part.strip().partition("=")
            if not sep:
                raise VariantError(f"{k}={value!r}: item {part.strip()!r} is not NAME=MODEL[@INSTANCE_TYPE] "
                                   f"or NAME=@INSTANCE_TYPE; e.g. {example}")
            pairs.append((name.strip(), spec.strip()))
    else:
        raise VariantError(f"{k}={value!r} is not NAME=MODEL[@INSTANCE_TYPE] items; e.g. {example}")
    if not pairs or pairs == [("", "")]:
        raise VariantError(f"{k}={value!r} names no variant; e.g. {example}")
    seen: set[str] = set()
    items = []
    for name, spec in pairs:
        if not NAME.match(name):
            raise VariantError(f"{k}: variant name {name!r} is not 1-16 lowercase letters, digits or - "
                               "(starting and ending with a letter or digit)")
        if name in seen:
            raise VariantError(f"{k}: variant name {name!r} is given twice")
        seen.add(name)
        items.append(_item(k, name, spec, example))
    if len(items) > MAX_PER_BACKEND:
        raise VariantError(f"{k}: {len(items)} variants; at most {MAX_PER_BACKEND} per backend "
                           "(each owns a block of the VPC's subnet addresses)")
    return tuple(items)


def stack_name(backend_id: str, variant: str | None) -> str:
    base = catalog.BACKENDS[backend_id].stack_name
    return f"{base}-{variant}" if variant else base


def endpoint_name(backend_id: str, variant: str | None) -> str:
    return f"{backend_id}{SEP}{variant}" if variant else backend_id


def split(name: str) -> tuple[str, str | None]:
    """``g6@bf16`` -> ("g6", "bf16"); ``g6`` -> ("g6", None)."""
    base, sep, variant = name.partition(SEP)
    return base, (variant if sep else None)


def from_stack_name(stack: str) -> tuple[str, str] | None:
    """``G6Stack-bf16`` -> ("g6", "bf16"); None for a name that is no backend's variant stack."""
    for b in catalog.BACKENDS.values():
        prefix = b.stack_name + "-"
        if stack.startswith(prefix) and NAME.match(stack[len(prefix):]):
            return b.id, stack[len(prefix):]
    return None


def scheme_of(model_id: str | None) -> str | None:
    """The weight scheme a served model id names: a package's scheme, a catalog model's, else None."""
    if not model_id:
        return None
    from kit.schemes import scheme_of_model

    try:
        s = scheme_of_model(model_id)
    except ValueError:
        return None
    return s.name if s else KNOWN_SCHEMES.get(model_id)


def precision_of(scheme: str | None) -> str | None:
    """The weight precision of a scheme for the cost model: a package's linears (int4, int8), a
    catalog model's (bf16, w4a16 -> int4); None when the scheme is unknown."""
    if not scheme:
        return None
    from kit.schemes import SCHEMES

    return SCHEME_PRECISION.get(scheme) or (SCHEMES[scheme].linear if scheme in SCHEMES else None)


def label(name: str, model_id: str | None, scheme: str | None = None) -> str:
    """How tables show a deployment: ``g6@bf16 · google/gemma-4-E2B-it (bf16)``; a package id
    names its scheme already (``g6@emb4 · package:emb4``)."""
    scheme = scheme or scheme_of(model_id)
    text = f"{name} · {model_id}" if model_id else name
    if scheme and scheme != UNKNOWN_SCHEME and model_id and scheme not in model_id.split(":")[-1:]:
        text += f" ({scheme})"
    return text
