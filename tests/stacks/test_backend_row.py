"""A backend is a catalog row, not code (docs/adding-a-backend.md): a g6e.xlarge backend typed as
one row of kit/catalog.py, and nothing else, synthesizes as a full backend stack: the shared EC2
construct on its own instance type and subnet, behind the image check, with the standard outputs,
cdk-nag clean (the synthesis raises on any unacknowledged finding), and its context keys known to
the config parser."""
from __future__ import annotations

import pytest

from tests.kit.catalog_rows import G6E, RowSynthError, synth_with_rows


def _of_type(template: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


@pytest.fixture(scope="module")
def with_g6e(tmp_path_factory):
    return synth_with_rows(tmp_path_factory.mktemp("g6e"), [G6E], backends="g6,g6e",
                           g6e_instance_type="g6e.2xlarge")


def test_the_row_alone_makes_a_stack_on_its_instance_type(with_g6e):
    assert {"G6Stack", "G6eStack", "NetworkStack"} <= set(with_g6e)
    (instance,) = _of_type(with_g6e["G6eStack"], "AWS::EC2::Instance").values()
    assert instance["Properties"]["InstanceType"] == "g6e.2xlarge"  # its own -c <id>_instance_type key
    # the same construct as g6: the same kinds of resources, the same outputs
    kinds = {r["Type"] for r in with_g6e["G6eStack"]["Resources"].values()}
    assert kinds == {r["Type"] for r in with_g6e["G6Stack"]["Resources"].values()}
    assert set(with_g6e["G6eStack"]["Outputs"]) == set(with_g6e["G6Stack"]["Outputs"])


def test_the_row_gets_its_declared_subnet_not_another_backends(with_g6e):
    def cidrs(stack: str) -> set[str]:
        out = set()
        for r in with_g6e[stack]["Resources"].values():
            props = r.get("Properties", {})
            if r["Type"] == "AWS::CloudFormation::CustomResource" or r["Type"].startswith("Custom::"):
                if "CidrBase" in props:
                    out.add(str(props["CidrBase"]))
        return out

    assert cidrs("G6eStack") and cidrs("G6eStack").isdisjoint(cidrs("G6Stack"))


def test_a_type_the_row_does_not_accept_is_one_config_line(tmp_path):
    with pytest.raises(RowSynthError, match=r"^g6e_instance_type='inf2.xlarge'"):
        synth_with_rows(tmp_path, [G6E], backends="g6e", g6e_instance_type="inf2.xlarge")
