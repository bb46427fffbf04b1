#!/usr/bin/env python3
"""CDK entry point: parse cdk.json context once, wire the network and the selected backends."""
from __future__ import annotations

import sys

import aws_cdk as cdk

from stacks.config import ConfigError, parse


def main() -> None:
    app = cdk.App()
    try:
        config = parse({k: app.node.try_get_context(k) for k in _context_keys(app)})
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    # Stacks are wired by stacks.wiring (NetworkStack, backends, image pipelines, cdk-nag).
    from stacks.wiring import build

    build(app, config)
    app.synth()


def _context_keys(app: cdk.App) -> list[str]:
    from stacks.config import KNOWN_KEYS

    return [k for k in KNOWN_KEYS if app.node.try_get_context(k) is not None]


if __name__ == "__main__":
    main()
