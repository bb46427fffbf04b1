"""The boot variables (kit/contracts/boot_env.py) against the scripts that read them (userdata/*.sh),
the stacks that write them (every EC2 backend's kit.env) and the table in docs/stacks.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit.catalog import BACKENDS
from kit.contracts import boot_env as be
from kit.image_families import IMAGE_FAMILIES
from tests.stacks.conftest import EC2_STACKS, ROOT
from tests.stacks.test_ec2_backends import kit_env, user_data

USERDATA = ROOT / "userdata"
COMMON = ("boot.sh", "lib.sh")  # every EC2 backend runs these beside its engine script
_NAME = re.compile(r"\bKIT_[A-Z0-9_]+\b")
_ASSIGNED = re.compile(r"^\s*(?:export\s+|local\s+)?(KIT_[A-Z0-9_]+)=", re.M)
_DEFAULTED = re.compile(r"\$\{(KIT_[A-Z0-9_]+):[-=+]")


def _split(text: str) -> tuple[str, str]:
    """(code, comments) of a script: comment lines and trailing `` # ...`` comments go to the second."""
    code, comments = [], []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            comments.append(line)
            continue
        m = re.search(r"\s#\s.*$", line)
        if m:
            comments.append(m.group(0))
            line = line[:m.start()]
        code.append(line)
    return "\n".join(code), "\n".join(comments)


class Script:
    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.code, self.comments = _split(path.read_text())
        self.assigned = set(_ASSIGNED.findall(self.code))
        self.defaulted = set(_DEFAULTED.findall(self.code))
        # read: named in code other than as the left side of an assignment
        rhs = _ASSIGNED.sub(lambda m: m.group(0)[:m.start(1) - m.start(0)], self.code)
        self.read = set(_NAME.findall(rhs))
        self.documented = set(_NAME.findall(self.comments))


SCRIPTS = {p.name: Script(p) for p in sorted(USERDATA.glob("*.sh"))}


def backends_by_engine() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {e: [] for e in be.ENGINES}
    for b in BACKENDS.values():
        if b.service == "ec2":
            out[IMAGE_FAMILIES[b.image].engine_script].append(b.id)
    return out


def test_the_scanner_sees_reads_assignments_and_defaults():
    s = Script.__new__(Script)
    code, comments = _split('KIT_A=${KIT_A:-/x}  # KIT_DOC here\n# KIT_B too\necho "$KIT_C" $((1 + KIT_D))\n')
    assert _NAME.findall(comments) == ["KIT_DOC", "KIT_B"]
    assert set(_ASSIGNED.findall(code)) == {"KIT_A"} and set(_DEFAULTED.findall(code)) == {"KIT_A"}
    s.code = code
    rhs = _ASSIGNED.sub(lambda m: m.group(0)[:m.start(1) - m.start(0)], code)
    assert set(_NAME.findall(rhs)) == {"KIT_A", "KIT_C", "KIT_D"}


def test_the_engine_scripts_are_the_image_families():
    assert {f.engine_script for f in IMAGE_FAMILIES.values()} == set(be.ENGINES)
    assert set(SCRIPTS) == {*COMMON, *be.ENGINES}


def test_every_variable_a_script_reads_or_documents_is_declared():
    for s in SCRIPTS.values():
        assert s.read <= set(be.BY_NAME), f"{s.name} reads undeclared {sorted(s.read - set(be.BY_NAME))}"
        assert s.documented <= set(be.BY_NAME), \
            f"{s.name}'s comments name undeclared {sorted(s.documented - set(be.BY_NAME))}"


def test_every_declared_variable_is_read_by_some_script():
    read = set().union(*(s.read for s in SCRIPTS.values()))
    assert set(be.BY_NAME) <= read, f"declared, read by no script: {sorted(set(be.BY_NAME) - read)}"


def test_who_sets_each_variable():
    assigned = set().union(*(s.assigned for s in SCRIPTS.values()))
    defaulted = set().union(*(s.defaulted for s in SCRIPTS.values()))
    for v in be.BOOT_VARS:
        if v.set_by == be.STACK:
            assert v.name not in assigned, f"{v.name} comes from kit.env; a script assigns it"
        elif v.set_by == be.SCRIPT:
            assert v.name in defaulted, f"{v.name} has no ${{{v.name}:-default}} in any script"
        else:
            assert v.name in assigned and v.name not in defaulted, f"{v.name}: derived, set by a script only"


@pytest.mark.parametrize("engine", be.ENGINES)
def test_a_variable_read_without_a_default_is_always_written_for_that_engine(engine):
    """Under ``set -u`` an unset variable read bare stops the boot: what an engine's scripts read
    without a default (and without a guard such as ``${KIT_X:-}``) must be required for it."""
    scripts = [SCRIPTS[n] for n in (*COMMON, engine)]
    assigned = set().union(*(s.assigned for s in scripts))
    for s in scripts:
        for name in sorted(s.read - s.defaulted - assigned):
            v = be.BY_NAME[name]
            assert v.set_by == be.STACK and engine in v.engines and v.required, (s.name, name)


def test_docs_table_is_the_declaration():
    doc = (ROOT / "docs" / "stacks.md").read_text()
    table = be.markdown_table(backends_by_engine())
    assert table in doc, "docs/stacks.md 'Boot variables' is out of date; it should read:\n" + table


@pytest.mark.parametrize("backend,stack", sorted(EC2_STACKS.items()))
def test_every_ec2_stack_writes_exactly_the_declared_variables(kit, backend, stack):
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    env = kit_env(user_data(instance))
    engine = IMAGE_FAMILIES[BACKENDS[backend].image].engine_script
    declared = {v.name: v for v in be.for_engine(engine)}
    assert set(env) <= set(declared)
    assert {k for k, v in declared.items() if v.required} <= set(env)


def test_check_env_names_the_first_problem():
    required = {v.name: "x" for v in be.for_engine(be.NEURON) if v.required}
    assert list(be.check_env(required, be.NEURON)) == sorted(required)
    for env, msg in [
        ({**required, "KIT_NEW": "1"}, "KIT_NEW for engine-neuron.sh: not declared in kit/contracts/boot_env.py"),
        ({**required, "KIT_LOG_DIR": "/tmp"}, "KIT_LOG_DIR for engine-neuron.sh: set by the scripts, not the stack"),
        ({**required, "KIT_VLLM_ARGS": ""}, "declared only for engine-vllm-gpu.sh, engine-vllm-g5g.sh"),
        ({**required, "kit_lower": ""}, "'kit_lower' must look like KIT_NAME"),
        ({k: v for k, v in required.items() if k != "KIT_TP_DEGREES"}, "lacks KIT_TP_DEGREES"),
    ]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            be.check_env(env, be.NEURON)
    with pytest.raises(ValueError, match="engine script 'engine-x.sh' is not one of"):
        be.check_env({}, "engine-x.sh")
