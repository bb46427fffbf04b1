"""One synthesis of the whole kit per test session, shared by every stack test.

The app is built exactly as app.py builds it (cdk.json context, kit.config.parse,
stacks.wiring.build) with a fixed clock, so TTL values are predictable. cdk-nag runs as a
validation plugin during synthesis: a finding without acknowledgment makes synth raise.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from kit.catalog import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
CDK_CONTEXT: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]
FIXED_NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=timezone.utc)
# What a script started by systemd (cloud-init's final stage, the kit's units, the Image Builder
# agent) gets as PATH: systemd's default for the system manager (systemd.exec(5), "Environment
# variables in spawned processes": PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin[:/sbin:/bin]),
# with no login profile and no HOME. Tests run instance scripts under it, a stand-in directory
# first only for tools the test replaces (each of which lives in one of these directories).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# EC2 backend id -> stack name, read from the catalog when this module is imported: every test
# parametrized over it collects a row added to kit/catalog.py (tests/stacks/test_new_row_collects.py
# shows it), never a list typed here.
EC2_STACKS = {b.id: b.stack_name for b in BACKENDS.values() if b.service == "ec2"}


def boot_parameter(template: dict) -> str:
    """The SSM parameter a backend stack's instance boots: a public DLAMI's is an SSM-typed stack
    parameter; a kit image's is read by Custom::ImagesReady (stacks/image_guard.py), its own entry."""
    (instance,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Instance"]
    image = instance["Properties"]["ImageId"]
    if "Ref" in image:
        param = template["Parameters"][image["Ref"]]
        assert param["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
        return param["Default"]
    lid, attr = image["Fn::GetAtt"]
    check = template["Resources"][lid]
    assert check["Type"] == "Custom::ImagesReady" and attr == "BootAmi"
    (own,) = [i for i in check["Properties"]["Images"] if i["Key"] == attr]
    return own["Parameter"] or own["Ami"]


def config_error(**context) -> str:
    """The message kit.config.parse refuses ``context`` with, checked to be one line."""
    from kit.config import ConfigError, parse

    with pytest.raises(ConfigError) as e:
        parse(context)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@dataclass
class Synth:
    app: Any
    config: Any
    stacks: dict[str, Any]
    templates: dict[str, dict]  # stack name -> template JSON as written to cdk.out
    outdir: Path
    _assertions: dict = field(default_factory=dict, repr=False)

    def resources(self, stack: str, type_: str) -> dict[str, dict]:
        return {k: v for k, v in self.templates[stack]["Resources"].items() if v["Type"] == type_}

    def template(self, stack: str):
        """The stack's template for aws_cdk.assertions (has_resource_properties, resource_count_is)."""
        from aws_cdk.assertions import Template

        if stack not in self._assertions:
            self._assertions[stack] = Template.from_json(self.templates[stack])
        return self._assertions[stack]

    def one(self, stack: str, type_: str) -> tuple[str, dict]:
        found = self.resources(stack, type_)
        assert len(found) == 1, f"{stack}: expected one {type_}, found {sorted(found)}"
        return next(iter(found.items()))


def synth(outdir: Path, **overrides: Any) -> Synth:
    import aws_cdk as cdk

    from kit.config import KNOWN_KEYS, parse
    from stacks.wiring import build

    context = {**CDK_CONTEXT, **overrides}
    app = cdk.App(context=context, outdir=str(outdir), builtin_cloud_formation_validation=False)  # as app.py
    config = parse({k: v for k, v in context.items() if k in KNOWN_KEYS})
    stacks = build(app, config, now=FIXED_NOW)
    assembly = app.synth()
    templates = {name: json.loads(Path(assembly.get_stack_by_name(name).template_full_path).read_text())
                 for name in stacks}
    return Synth(app, config, stacks, templates, outdir)


@pytest.fixture(scope="session")
def kit(tmp_path_factory) -> Synth:
    """Every backend with the defaults from cdk.json."""
    return synth(tmp_path_factory.mktemp("cdk-out"))
