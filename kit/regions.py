"""One region resolution for the whole kit: deploy, discovery, preflight, cost and lint.

The kit's region is, in this order:
1. an explicit value: ``cdk deploy -c region=…`` (app.py, through kit.config) or ``--region``
   (harness.run, harness.account.preflight);
2. context ``region`` as the CDK CLI reads it: cdk.json's, else cdk.context.json's (an
   organizer's handout, docs/workshop.md), else ~/.cdk.json's (``read_context``);
3. ``DEFAULT_REGION``.

The shell's ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` are *not* consulted. The stacks carry their
region in ``env`` (stacks/wiring.py): ``cdk deploy`` deploys there whatever the shell says, so a
harness that followed the shell would look in another region and find nothing. When the shell
names another region, ``shell_note`` says which one is used and why, in one line.

A backend whose instance type its region lacks goes elsewhere with ``<id>_region`` (context, in
cdk.json or ``-c``): it gets its own NetworkStack (and image and package stacks) in that region,
and discovery looks for it there. ``KitRegions.regions`` is every region the configuration uses.

No aws-cdk-lib import: the harness, preflight and tests use this without jsii.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kit import catalog
from kit.errors import KitError

DEFAULT_REGION = "us-east-1"
CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"
REGION_PATTERN = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
SHELL_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


class RegionError(KitError, ValueError):
    """A region value is malformed. str(e) is the one line to show."""


def region_key(backend_id: str) -> str:
    return f"{backend_id}_region"


# The files the CDK CLI reads context from besides ``-c``, highest first (aws-cdk-cli
# packages/aws-cdk/lib/cli/user-configuration.ts at 03d9d0f, Configuration.loadConfigFiles:
# contextSources = [command line, cdk.json "context", cdk.context.json, ~/.cdk.json "context"]).
# A key is taken from the first source that defines it (toolkit-lib lib/api/context.ts,
# Context.get); the app receives ``Context.all``, the sources deep-merged lowest first
# (Settings.merge, deepMerge): for the kit's string values, the first source's value.
# cdk.context.json is the whole file (no "context" key) and lies next to cdk.json (the CLI reads
# both from its working directory, where cdk.json is).
CDK_CONTEXT_JSON = "cdk.context.json"  # aws-cdk-cli PROJECT_CONTEXT
USER_CDK_JSON = "~/.cdk.json"  # aws-cdk-cli USER_DEFAULTS


def _deep_merge(target: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    """The CDK CLI's deepMerge (aws-cdk-cli toolkit-lib lib/util/objects.ts; bundled in
    node_modules/aws-cdk/lib/index.js 2.1148.1): an object merges key by key into an object (an
    old value that is not one is replaced by {} first); any other value, a list included,
    replaces; keys that could pollute a prototype are skipped."""
    dst = dict(target)
    for key, value in src.items():
        if key in ("__proto__", "constructor", "prototype"):
            continue
        if isinstance(value, dict):
            dst[key] = _deep_merge(dst[key] if isinstance(dst.get(key), dict) else {}, value)
        else:
            dst[key] = value
    return dst


def context_files(cdk_json: Path | None = None, *, required: bool = False) -> list[tuple[Path, dict[str, Any]]]:
    """The context of each file the CDK CLI reads, highest first: cdk.json's ``context``,
    cdk.context.json next to it, ~/.cdk.json's ``context``; a file that does not exist is left
    out (cdk.json too, unless ``required``). JsonFileError, one line naming the file, for one that
    exists and cannot be used."""
    from kit.jsonfile import JsonFileError, json_type, read_object

    path = Path(cdk_json or CDK_JSON)
    label = "--cdk-json" if required else "cdk.json"
    out: list[tuple[Path, dict[str, Any]]] = []
    if required or os.path.lexists(path):
        ctx = read_object(path, label=label).get("context", {})
        if not isinstance(ctx, dict):
            raise JsonFileError(f"{label} {path}: \"context\" is a JSON {json_type(ctx)}, not an object of KEY: VALUE")
        out.append((path, dict(ctx)))
    project = path.parent / CDK_CONTEXT_JSON
    if os.path.lexists(project):
        out.append((project, read_object(project, label=CDK_CONTEXT_JSON)))
    user = Path(os.path.expanduser(USER_CDK_JSON))
    if os.path.lexists(user):
        ctx = read_object(user, label=USER_CDK_JSON).get("context", {})
        if not isinstance(ctx, dict):
            raise JsonFileError(f"{USER_CDK_JSON} {user}: \"context\" is a JSON {json_type(ctx)}, not an object")
        out.append((user, dict(ctx)))
    return out


def read_context(cdk_json: Path | None = None, *, required: bool = False) -> dict[str, Any]:
    """The context ``cdk deploy`` gives the app without ``-c``: cdk.json's ``context`` (default:
    the repo's cdk.json), over cdk.context.json next to it, over ~/.cdk.json's (``context_files``,
    merged as the CDK CLI merges them), each read by kit/jsonfile.py (bounded). Empty when none
    exists and ``required`` is false (no cdk.json where a command runs); ``JsonFileError``, one
    line naming the file, when cdk.json was named (``required``: the user's ``--cdk-json``) and
    does not exist, or when a file exists but is not a regular file, is too large, is not JSON,
    is not an object or has a ``context`` that is not one. Never a silent default configuration
    in place of a file the user meant."""
    merged: dict[str, Any] = {}
    for _, ctx in reversed(context_files(cdk_json, required=required)):
        merged = _deep_merge(merged, ctx)
    return merged


def context_with(cdk_json: Path | None, overrides: list[str], *, required: bool = False) -> dict[str, Any]:
    """The files' context (``read_context``) with ``-c KEY=VALUE`` overrides applied, as the CDK CLI applies them
    (a command that wraps ``cdk deploy`` must decide from the same context the deploy will see).
    Raises ValueError naming a malformed override or the file (``read_context``)."""
    ctx = read_context(cdk_json, required=required)
    for o in overrides:
        key, sep, value = o.partition("=")
        if not sep or not key:
            raise ValueError(f"-c {o!r}: expected KEY=VALUE")
        ctx[key] = value
    return ctx


def command_context(cdk_json: Path | None, overrides: list[str], prog: str) -> dict[str, Any]:
    """What a command that wraps ``cdk deploy`` decides from: ``--cdk-json`` (else ./cdk.json when
    there is one, as the CLI reads it) plus ``-c``; a named file that is missing or broken, or a
    malformed override, is a ValueError of one line starting with ``prog``."""
    try:
        return context_with(cdk_json or Path("cdk.json"), overrides, required=cdk_json is not None)
    except ValueError as e:
        raise ValueError(f"{prog}: {e}") from None


def check_region(key: str, value: Any) -> str:
    if not isinstance(value, str) or not REGION_PATTERN.match(value):
        raise RegionError(f"{key}={value!r} is not an AWS region code (e.g. us-east-1)")
    from kit.awsdata import region_problem  # botocore's partitions.json: zz-fake-9 looks valid

    problem = region_problem(value)
    if problem:
        raise RegionError(f"{key}={value!r}{problem}")
    return value


@dataclass(frozen=True)
class KitRegions:
    region: str  # the kit's region: every backend without its own <id>_region
    source: str  # where it came from, for the one line the commands print
    overrides: Mapping[str, str] = field(default_factory=dict)  # backend id -> its own region

    def of(self, backend_id: str) -> str:
        return self.overrides.get(backend_id, self.region)

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region in use: the kit's first, then the overrides' in catalog order."""
        out = [self.region]
        for bid in catalog.BACKEND_IDS:
            r = self.overrides.get(bid)
            if r and r not in out:
                out.append(r)
        return tuple(out)

    def backends_in(self, region: str, backend_ids: tuple[str, ...] = catalog.BACKEND_IDS) -> tuple[str, ...]:
        return tuple(b for b in backend_ids if self.of(b) == region)

    def describe(self) -> str:
        """E.g. ``us-east-1 (cdk.json context region); g5g in us-west-2 (g5g_region)``."""
        text = f"{self.region} ({self.source})"
        extra = [f"{b} in {r} ({region_key(b)})" for b, r in self.overrides.items() if r != self.region]
        return "; ".join([text, *extra])

    def shell_note(self, env: Mapping[str, str]) -> str | None:
        """One line when the shell names a region the kit does not use."""
        for var in SHELL_VARIABLES:
            value = env.get(var)
            if value and value not in self.regions:
                return (f"{var}={value} in your shell is not used: the kit's stacks deploy to "
                        f"{self.describe()}; to use {value}, set context region in cdk.json "
                        f"or pass -c region={value} to cdk and --region {value} to the harness")
        return None


def resolve(explicit: str | None = None, context: Mapping[str, Any] | None = None,
            cdk_json: Path | None = None) -> KitRegions:
    """The kit's regions from an explicit value, else ``context`` (default: cdk.json's) ``region``,
    else DEFAULT_REGION; per-backend ``<id>_region`` from the context. Raises RegionError."""
    if context is None:
        from kit.jsonfile import JsonFileError

        try:
            ctx: Mapping[str, Any] = read_context(cdk_json)
        except JsonFileError as e:  # the region cannot be known from a broken cdk.json: say which
            raise RegionError(str(e)) from None
    else:
        ctx = context
    if explicit:
        region, source = check_region("--region", explicit), "--region"
    elif ctx.get("region") is not None:
        region, source = check_region("region", ctx["region"]), "context region"
    else:
        region, source = DEFAULT_REGION, "default"
    overrides = {}
    for bid in catalog.BACKEND_IDS:
        value = ctx.get(region_key(bid))
        if value is not None:
            overrides[bid] = check_region(region_key(bid), value)
    return KitRegions(region, source, overrides)


def template_regions(cdk_out: Path) -> dict[str, list[Path]]:
    """Region -> templates, from the cloud assembly's manifest (each stack's ``environment`` is
    ``aws://<account>/<region>``)."""
    manifest = json.loads((Path(cdk_out) / "manifest.json").read_text())
    out: dict[str, list[Path]] = {}
    for art in manifest.get("artifacts", {}).values():
        if art.get("type") != "aws:cloudformation:stack":
            continue
        region = art["environment"].rsplit("/", 1)[-1]
        out.setdefault(region, []).append(Path(cdk_out) / art["properties"]["templateFile"])
    return out


def lint_commands(cdk_out: Path, cfn_lint: str = "cfn-lint") -> list[list[str]]:
    """One cfn-lint command per region, with ``--regions`` set to the templates' own region:
    cfn-lint otherwise checks against the shell's region (AWS_DEFAULT_REGION), where e.g.
    g5g.2xlarge is not offered (E3628) although the template deploys elsewhere."""
    return [[cfn_lint, *map(str, sorted(paths)), "--regions", region]  # --regions takes 1+ values: last
            for region, paths in sorted(template_regions(cdk_out).items())]


def main(argv: list[str] | None = None) -> int:
    """``python -m kit.regions`` prints the kit's regions; ``lint CDK_OUT`` runs cfn-lint per region."""
    import os
    import subprocess

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lint"] and len(argv) == 2:
        rc = 0
        cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
        for cmd in lint_commands(Path(argv[1]), cfn_lint):
            rc = max(rc, subprocess.run(cmd).returncode)
        return rc
    if argv:
        print("usage: python -m kit.regions [lint CDK_OUT]", file=sys.stderr)
        return 2
    try:
        kit = resolve()
    except RegionError as e:
        print(f"regions: {e}", file=sys.stderr)
        return 2
    print(kit.describe())
    note = kit.shell_note(os.environ)
    if note:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
