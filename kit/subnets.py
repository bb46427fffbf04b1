"""The kit VPC's address plan: which /24s each stack's subnets take, declared, never derived from
list positions.

NetworkStack's VPC is 10.42.0.0/16 (stacks/network.py). Every subnet the kit adds to it is made by
Custom::AzChoice (kit/az_choice.py), which gives the AZ with letter i the /24 ``10.42.<base+i>.0``
of a block of 8 (letters a-h). So each stack owns one block, named by ``base``, the third octet of
its first /24:

- NetworkStack's own subnets: the lowest /24s (CDK allocates them from the bottom, a public and an
  isolated /24 per AZ, at most 6 AZs): third octets 0-15 are kept for them;
- each EC2 backend's stack and each of its variants: the blocks its catalog row declares
  (kit/catalog.py ``Backend.subnet_blocks``; g6 64, g5g 72, inf2 80, trn1 88, their variants
  160-255, the values the old index arithmetic gave them, so nothing deployed moves);
- each image build: the block declared in ``IMAGE_BLOCKS``.

A block is a fixed address: adding a catalog row or an image never renumbers another stack's
subnet (before, the third octet was 64 + 8 x the row's index among the EC2 backends, so inserting a
backend replaced every later backend's subnet and instance). Running out is a one-line config
error (``SubnetError``), not a traceback.

Plain Python, no aws-cdk-lib.
"""
from __future__ import annotations

from typing import Iterable

from kit.catalog import BACKENDS
from kit.errors import KitError

CIDR_PREFIX = "10.42"  # NetworkStack's VPC is 10.42.0.0/16
BLOCK = 8  # /24s per block: one per AZ letter a-h (kit/az_choice.py MAX_LETTERS)
NETWORK_OCTETS = range(0, 16)  # NetworkStack's own subnets (at most 12 used)
# Image builds (kit/image_facts.py IMAGE_PARAMETERS): the blocks the old arithmetic (128 + 8 x the
# image's position) gave them.
IMAGE_BLOCKS: dict[str, int] = {"vllm-cuda": 128, "vllm-sm75": 136, "neuron": 144, "neuron-sdk231": 152}


class SubnetError(KitError, ValueError):
    """The address plan cannot place a stack; str(e) is the one line to show."""


def _octets(base: int) -> range:
    return range(base, base + BLOCK)


def used() -> dict[int, str]:
    """Third octet -> who holds it, for every declared block (later owners of a /24 overwrite
    earlier ones in the map; ``problems`` reports such overlaps)."""
    out = {o: "NetworkStack" for o in NETWORK_OCTETS}
    for image, base in IMAGE_BLOCKS.items():
        out.update({o: f"image {image}" for o in _octets(base)})
    for b in BACKENDS.values():
        for i, base in enumerate(b.subnet_blocks):
            out.update({o: f"{b.id} {'stack' if i == 0 else f'variant slot {i}'}" for o in _octets(base)})
    return out


def problems(backend_ids: Iterable[str] | None = None) -> list[str]:
    """Declarations that cannot work, one line each: a block outside 10.42.0.0/16 or not aligned to
    8, one that overlaps another (any row's: a row not deployed today may be tomorrow), and an EC2
    row among ``backend_ids`` (default: all) that declares none."""
    ids = list(BACKENDS) if backend_ids is None else list(backend_ids)
    owners: dict[int, str] = {o: "NetworkStack" for o in NETWORK_OCTETS}
    out: list[str] = []

    def claim(base: int, who: str) -> None:
        if base % BLOCK or not 0 <= base <= 256 - BLOCK:
            out.append(f"{who}: subnet block {base} is not a multiple of {BLOCK} from 0 to {256 - BLOCK} "
                       f"(the third octet of {CIDR_PREFIX}.<block>.0/24)")
            return
        clash = sorted({owners[o] for o in _octets(base) if o in owners})
        if clash:
            out.append(f"{who}: subnet block {base} ({CIDR_PREFIX}.{base}.0-{CIDR_PREFIX}.{base + BLOCK - 1}.0) "
                       f"overlaps {', '.join(clash)}; free blocks: {', '.join(map(str, free_blocks())) or 'none'}")
        owners.update({o: who for o in _octets(base)})

    for image, base in IMAGE_BLOCKS.items():
        claim(base, f"image {image}")
    for b in BACKENDS.values():
        if b.service == "ec2" and not b.subnet_blocks and b.id in ids:
            out.append(f"{b.id}: kit/catalog.py declares no subnet_blocks for this EC2 backend; give it a free "
                       f"block: {', '.join(map(str, free_blocks())) or 'none left'}")
        for i, base in enumerate(b.subnet_blocks):
            claim(base, f"{b.id} {'stack' if i == 0 else f'variant slot {i}'}")
    return out


def free_blocks() -> list[int]:
    """Block bases no declaration touches."""
    taken = used()
    return [base for base in range(0, 256, BLOCK) if not any(o in taken for o in _octets(base))]


def backend_block(backend_id: str, slot: int | None = None) -> int:
    """The block of a backend's own stack (``slot`` None) or of its variant in ``slot`` (0-based,
    kit/variants.py). SubnetError when the row declares none for it."""
    blocks = BACKENDS[backend_id].subnet_blocks
    i = 0 if slot is None else 1 + slot
    if i >= len(blocks):
        what = "its stack" if slot is None else f"variant {slot + 1}"
        raise SubnetError(f"{backend_id}: no subnet block declared for {what} (kit/catalog.py subnet_blocks has "
                          f"{len(blocks)}: one for the stack, then one per variant); free blocks: "
                          f"{', '.join(map(str, free_blocks())) or 'none'}")
    return blocks[i]


def variant_room(backend_id: str) -> int:
    """How many variants the row's declared blocks can hold."""
    return max(len(BACKENDS[backend_id].subnet_blocks) - 1, 0)


def image_block(image: str) -> int:
    try:
        return IMAGE_BLOCKS[image]
    except KeyError:
        raise SubnetError(f"image {image}: no subnet block declared in kit/subnets.py IMAGE_BLOCKS; free blocks: "
                          f"{', '.join(map(str, free_blocks())) or 'none'}") from None
