"""``python -m harness deploy [STACK ... | --all] [--leave-out-missing] [-c KEY=VALUE ...] [-- CDK ARGS]``
(``make deploy ARGS='...'``): ``cdk deploy`` that first checks the machine images of exactly
what it deploys, and creates nothing when one is missing.

Before calling the CDK it asks, in each region, whether every image the selected backend stacks
boot exists: the kit's images by their SSM parameter (``GetParameters``; a name that does not
exist comes back in ``InvalidParameters``) and then the AMI the parameter names, an AMI given
with ``-c <id>_ami`` directly, with ``DescribeImages`` (``available``; a deregistered AMI behind a
parameter that outlived it is missing too, as Custom::ImagesReady decides). For each missing one it prints one line naming the image, its region, the
stacks that boot it and the command that makes it (``python -m harness images build ...``), then
stops (exit 1) before anything is created; with ``--leave-out-missing`` it deploys the other
backends instead. Then it runs ``npx cdk deploy`` with ``-c backends=`` narrowed to the selected
backends, so the templates' own check (Custom::ImagesReady, stacks/image_guard.py, which refuses
every configured image that is missing because the app cannot see the CLI's selection) checks
the same set, and returns the CDK's exit code.

STACK names backend stacks (``G6Stack``, ``SageMakerStack``, a variant's stack); no STACK means
``--all``, every configured backend. NetworkStack, PackageStack and the image stacks come along
as the CDK's dependencies or through ``harness.account.images build``. Exit 2 on bad input, one line.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from kit.image_needs import ImageNeed, image_needs
from kit.cli import OneLineParser, one_line_errors

ClientFor = Callable[[str, str], Any]


def missing_images(needs: Sequence[ImageNeed], client: ClientFor) -> list[tuple[ImageNeed, str]]:
    """(need, what is wrong) for every need that does not exist or cannot be used."""
    out: list[tuple[ImageNeed, str]] = []
    by_region: dict[str, list[str]] = {}
    for n in needs:
        if n.parameter:
            by_region.setdefault(n.region, []).append(n.parameter)
    found: dict[tuple[str, str], str | None] = {}
    for region, names in by_region.items():
        names = sorted(set(names))
        ssm = client("ssm", region)
        for i in range(0, len(names), 10):  # GetParameters takes at most 10 names
            r = ssm.get_parameters(Names=names[i:i + 10])
            found.update({(region, p["Name"]): p.get("Value") for p in r.get("Parameters", [])})
    states: dict[tuple[str, str], str | None] = {}

    def state_of(region: str, ami: str) -> str | None:
        """The AMI's state when this account can see it, else None (asked once per AMI)."""
        if (region, ami) not in states:
            try:
                images = client("ec2", region).describe_images(ImageIds=[ami]).get("Images", [])
            except Exception as e:
                if not getattr(e, "response", {}).get("Error", {}).get("Code", "").startswith("InvalidAMIID"):
                    raise
                images = []
            states[(region, ami)] = images[0].get("State") if images else None
        return states[(region, ami)]

    for n in needs:
        if n.parameter:
            ami = found.get((n.region, n.parameter))
            if not ami:
                out.append((n, f"{n.parameter} does not exist"))
                continue
            state = state_of(n.region, ami)
            if state != "available":
                out.append((n, f"{n.parameter} names {ami}, which is "
                               + ("not visible to this account (deregistered?)" if state is None else state)))
            continue
        state = state_of(n.region, n.ami)
        if state != "available":
            out.append((n, f"{n.ami} is not visible to this account" if state is None else f"{n.ami} is {state}"))
    return out


def _context(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    from kit.regions import command_context

    return command_context(path, overrides, "harness deploy")


@one_line_errors("harness deploy")
def main(argv: list[str] | None = None, *, client: ClientFor | None = None,
         run: Callable[[list[str]], int] | None = None, out: TextIO = sys.stdout) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = OneLineParser(prog="python -m harness deploy", description=__doc__.split("\n\n")[0])
    p.add_argument("stacks", nargs="*", help="backend stacks (default: every configured backend)")
    p.add_argument("--all", action="store_true", help="every configured backend (the default)")
    p.add_argument("--leave-out-missing", action="store_true",
                   help="deploy the backends whose images exist, leave the others out")
    p.add_argument("--dry-run", action="store_true", help="check and print the cdk command, run nothing")
    p.add_argument("--cdk-json", type=Path, default=None, help="default ./cdk.json")
    p.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    try:
        a = p.parse_args(argv)
        ctx = _context(a.cdk_json, a.context)
        from kit import variants
        from kit.config import ConfigError, parse

        try:
            config = parse(ctx)
        except ConfigError as e:
            raise ValueError(f"config error: {e}") from None
        by_stack = {variants.stack_name(bc.id, bc.variant): bc for bc in config.deployments}
        if a.stacks and a.all:
            raise ValueError("harness deploy: give stacks or --all, not both")
        unknown = [s for s in a.stacks if s not in by_stack]
        if unknown:
            raise ValueError(f"harness deploy: {unknown[0]!r} is not a backend stack of this configuration; valid: "
                             f"{', '.join(by_stack)} (NetworkStack and image stacks: npx cdk deploy, or "
                             "python -m harness images build)")
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    chosen = [by_stack[s] for s in a.stacks] if a.stacks else list(config.deployments)
    ids = list(dict.fromkeys(bc.id for bc in chosen))
    # A variant deploys with its backend configured (its base stack is synthesized, not deployed).
    if client is None:
        import boto3

        client = lambda service, region: boto3.client(service, region_name=region)  # noqa: E731
    try:
        missing = missing_images(image_needs(config, tuple(chosen)), client)
    except Exception as e:  # noqa: BLE001 - no credentials, access denied: one line, nothing created
        print(f"harness deploy: could not check the machine images: {(str(e).splitlines() or [type(e).__name__])[0]}",
              file=out)
        return 1
    for need, problem in missing:
        print(need.line(problem), file=out)
    if missing:
        gone = {b for need, _ in missing for b in need.backend_ids}
        keep = [i for i in ids if i not in gone]
        if not a.leave_out_missing or not keep:
            rest = f"; or deploy the rest: python -m harness deploy {' '.join(a.stacks) or '--all'} --leave-out-missing" \
                if keep else ""
            print(f"nothing was deployed: {len(missing)} machine image{'s are' if len(missing) > 1 else ' is'} "
                  f"missing{rest}", file=out)
            return 1
        print(f"leaving out {', '.join(sorted(gone))}", file=out)
        chosen = [bc for bc in chosen if bc.id not in gone]
        ids = keep
    names = [variants.stack_name(bc.id, bc.variant) for bc in chosen] if a.stacks else ["--all"]
    cmd = ["npx", "cdk", "deploy", *names, "-c", f"backends={','.join(ids)}",
           *[x for c in a.context if not c.startswith("backends=") for x in ("-c", c)], *extra]
    print("$ " + " ".join(cmd), file=out, flush=True)
    if a.dry_run:
        return 0
    return (run or subprocess.call)(cmd)


if __name__ == "__main__":
    sys.exit(main())
