#!/usr/bin/env python3
"""CDK entry point: parse cdk.json context once, wire the network and the selected backends."""
from __future__ import annotations

import sys

import aws_cdk as cdk

from kit.config import ConfigError, parse


def main() -> None:
    # The built-in "CloudFormation Validate" plugin costs ~8 s per synth here and only warns;
    # cfn-lint checks every template instead (make lint, tests/stacks). cdk-nag still runs.
    app = cdk.App(builtin_cloud_formation_validation=False)
    try:
        # All of it: parse refuses a snake_case key it does not know (a typo) and skips CDK's own.
        config = parse({k: v for k, v in app.node.get_all_context().items() if v is not None})
        # Stacks are wired by stacks.wiring (NetworkStack, backends, image pipelines, cdk-nag);
        # a value only a stack can judge (e.g. an instance type the catalog lacks) is a ConfigError too.
        from stacks.wiring import build

        build(app, config)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    app.synth()


if __name__ == "__main__":
    main()
