"""One door to every harness command: ``python -m harness COMMAND [ARGS]`` (or ``inference-kit
COMMAND`` once the kit is pip-installed). Each command is still its own module, so the commands
people already type (``python -m harness.run``, ``python -m harness.bench`` ...) keep working.

Entries are "module:function" strings, imported only when chosen: ``python -m harness`` with no
command lists them without importing boto3, Strands or torch.
"""
from __future__ import annotations

import importlib
import sys

from kit.cli import run_command

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.run.cli:main", "agent trial + benchmark + accuracy + cost + report on what is deployed"),
    "preflight": ("harness.account.preflight:main", "credentials, quotas, offerings, images, model access, before spending"),
    "plan": ("harness.cost.placements:main", "where a Gemma 4 size fits, its ceiling and cost, per backend and instance"),
    "bench": ("harness.bench.cli:main", "the load benchmark against one endpoint"),
    "accuracy": ("harness.accuracy.cli:main", "paired accuracy between endpoints or packages"),
    "cost": ("harness.cost.__main__:main", "prices, $/M tokens, break-even against Bedrock"),
    "report": ("harness.report.__main__:main", "re-render a results directory's report offline"),
    "package": ("harness.package.__main__:main", "build, check, size and publish quantized packages"),
    "images": ("harness.account.images:main", "build, follow, list and share the kit's machine images"),
    "deploy": ("harness.account.deploy:main", "cdk deploy after checking the machine images of what it deploys"),
    "leftovers": ("harness.account.leftovers:main", "after cdk destroy: what still exists, $/month, how to remove it"),
}


def usage() -> str:
    w = max(map(len, COMMANDS))
    lines = ["usage: python -m harness COMMAND [ARGS]   (COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name.ljust(w)}  {about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"python -m harness: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, _, func = COMMANDS[name][0].partition(":")
    sys.argv = [f"python -m harness {name}", *rest]  # argparse's prog, as the user typed it
    # the command door (kit/cli.py): a KitError escaping the command is one line and its exit code
    return run_command(getattr(importlib.import_module(module), func), rest, f"python -m harness {name}")


if __name__ == "__main__":
    sys.exit(main())
