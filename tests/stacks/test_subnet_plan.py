"""Each EC2 stack's subnets come from an address block declared in its catalog
row (kit/catalog.py ``subnet_blocks``, kit/subnets.py), not from the row's position. Before, the
block was 64 + 8 x the row's index among the EC2 backends: a row inserted ahead of g6 renumbered
every later backend's subnet, which replaces the subnet and its instance on the next deploy, and a
fifth EC2 backend's variants ran past 10.42.255.0 with a traceback."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kit import subnets
from kit.catalog import BACKENDS
from kit.config import ConfigError, parse
from tests.kit.catalog_rows import G6E, synth_with_rows
from tests.stacks.conftest import synth

VARIANT = {"g6_variants": "bf16=google/gemma-4-E2B-it"}


@pytest.fixture(scope="module")
def with_variant(tmp_path_factory):
    """The default kit plus one g6 variant, synthesized once for this module."""
    return synth(tmp_path_factory.mktemp("variant"), **VARIANT).templates


def blocks(template: dict) -> list[int]:
    """The block bases the stack's Custom::AzChoice resources ask for."""
    return sorted(int(r["Properties"]["CidrBase"]) for r in template["Resources"].values()
                  if r["Type"] == "Custom::AzChoice")


def without_guard_inputs(template: dict) -> dict:
    import copy

    out = copy.deepcopy(template)
    for r in out["Resources"].values():
        if r["Type"] == "Custom::ImagesReady":
            r["Properties"].pop("Backends", None)
    return out


def differences(a, b, path: str = "") -> list[str]:
    """Paths where two templates differ, with both values (short), for a readable failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in
                (differences(a[k], b[k], f"{path}/{k}") if k in a and k in b else [f"{path}/{k}: only one side"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:120]!r} -> {str(b)[:120]!r}"]


def test_adding_a_backend_row_changes_no_existing_stack(tmp_path, with_variant):
    # g6e typed into kit/catalog.py *above* g6: the worst case for position-derived addresses.
    before = with_variant
    after = synth_with_rows(tmp_path, [dict(G6E, before="g6")],
                            backends=",".join(BACKENDS) + ",g6e", **VARIANT)
    assert set(after) - set(before) == {"G6eStack"}
    for name, template in before.items():
        assert blocks(after[name]) == blocks(template), name  # the subnets, said plainly
        # and nothing else in the stack moved either, but the image check's list of configured
        # backends (stacks/image_guard.py): a new backend is one more name the check reads, and
        # the check re-runs at every deploy anyway (CheckedAt); it replaces nothing
        moved = differences(without_guard_inputs(template), without_guard_inputs(after[name]))
        assert not moved, f"{name}: {moved[:5]}"
    own = G6E["subnet_blocks"][0]
    assert blocks(after["G6eStack"]) == [own]
    taken = {b for name, t in before.items() for b in blocks(t)}
    assert own not in taken


def test_existing_rows_keep_the_blocks_the_old_arithmetic_gave_them(kit, with_variant):
    # Nothing deployed moves when this change lands: 64 + 8 x index for the stacks, and
    # 160 + 8 x (3 x index + slot) for the variants, as stacks/az_choice.py computed them before.
    # The four EC2 rows that existed then, in their order then: a record, not the catalog's list.
    for index, bid in enumerate(["g6", "g5g", "inf2", "trn1"]):
        assert BACKENDS[bid].subnet_blocks == (64 + 8 * index, *(160 + 8 * (3 * index + s) for s in range(3)))
    assert blocks(kit.templates["G6Stack"]) == [64] and blocks(kit.templates["Trn1Stack"]) == [88]
    assert blocks(with_variant["G6Stack-bf16"]) == [160]


def test_the_declared_plan_has_no_overlap_and_stays_clear_of_the_network_stack(kit):
    import ipaddress

    assert subnets.problems() == []
    network = [ipaddress.ip_network(r["Properties"]["CidrBlock"]) for r in kit.templates["NetworkStack"]["Resources"].values()
               if r["Type"] == "AWS::EC2::Subnet"]
    assert network and all(n.subnet_of(ipaddress.ip_network("10.42.0.0/20")) for n in network)  # third octets 0-15
    assert min(b for row in BACKENDS.values() for b in row.subnet_blocks) >= 16


def test_a_row_without_blocks_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setitem(BACKENDS, "g6", replace(BACKENDS["g6"], subnet_blocks=()))
    with pytest.raises(ConfigError) as e:
        parse({"backends": "g6"})
    assert "\n" not in str(e.value)
    # the blocks no row declares (g6's own, now empty, among them), computed as the kit lists them
    free = ", ".join(map(str, subnets.free_blocks()))
    assert str(e.value) == ("g6: kit/catalog.py declares no subnet_blocks for this EC2 backend; give it a "
                            f"free block: {free}")
    assert "64" in free.split(", ")  # g6's own block, free once its row declares none
    parse({"backends": "bedrock"})  # not selected: nothing to place


def test_more_variants_than_declared_blocks_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setitem(BACKENDS, "g6", replace(BACKENDS["g6"], subnet_blocks=(64, 160)))
    with pytest.raises(ConfigError) as e:
        parse({"backends": "g6", "g6_variants": "a=google/gemma-4-E2B-it,b=google/gemma-4-E4B-it"})
    assert str(e.value).startswith("g6_variants: 2 variants, but kit/catalog.py declares subnet blocks for 1 (g6 "
                                   "subnet_blocks: the stack's, then one per variant); free blocks: ")
    assert "\n" not in str(e.value)


def test_overlapping_or_misaligned_declarations_are_named(monkeypatch):
    monkeypatch.setitem(BACKENDS, "g5g", replace(BACKENDS["g5g"], subnet_blocks=(64,)))
    monkeypatch.setitem(BACKENDS, "inf2", replace(BACKENDS["inf2"], subnet_blocks=(250,)))
    found = subnets.problems()
    assert any(p.startswith("g5g stack: subnet block 64 (10.42.64.0-10.42.71.0) overlaps g6 stack") for p in found)
    assert any(p.startswith("inf2 stack: subnet block 250 is not a multiple of 8") for p in found)
    with pytest.raises(ConfigError, match="overlaps g6 stack"):
        parse({"backends": "g5g"})


def test_the_row_helper_refuses_what_the_kit_refuses(tmp_path):
    from tests.kit.catalog_rows import RowSynthError

    with pytest.raises(RowSynthError, match=r"^g6e: kit/catalog.py declares no subnet_blocks"):
        synth_with_rows(tmp_path, [dict(G6E, subnet_blocks=[])], backends="g6e")
