"""python -m harness.package build|start|check|sizes — see README, "Quantized packages"."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from kit.schemes import DEFAULT_SCHEME, SCHEMES, scheme
from kit.cli import OneLineParser, one_line_errors

GIB = 2**30


def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m harness.package", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="repack a Gemma 4 checkpoint into a compressed-tensors package")
    b.add_argument("--source", help="local checkpoint directory or Hugging Face id (default: the scheme's source)")
    b.add_argument("--out", required=True, help="new local directory or s3://bucket/prefix")
    b.add_argument("--scheme", default=DEFAULT_SCHEME, choices=sorted(SCHEMES))
    b.add_argument("--revision", help="Hugging Face revision (default: main)")
    b.add_argument("--work", help="scratch directory for an s3:// build (default: the system temp dir)")
    r = sub.add_parser("start", help="start the build in the account (PackageStack) and follow its log")
    r.add_argument("--scheme", default=DEFAULT_SCHEME, choices=sorted(SCHEMES))
    r.add_argument("--source", help="Hugging Face id (default: the scheme's source)")
    r.add_argument("--revision", help="Hugging Face revision (default: main)")
    r.add_argument("--region", help="the region PackageStack is in (default: the kit's, cdk.json context region)")
    c = sub.add_parser("check", help="check a checkpoint's ignore list (and manifest, if any) before deploying")
    c.add_argument("directory")
    z = sub.add_parser("sizes", help="bytes per tensor group of every scheme, and what vLLM holds "
                       "after loading it, from a config.json alone")
    z.add_argument("config", help="path to a Gemma 4 config.json")
    return p


def _check(directory: Path) -> int:
    """Exit 0: a package vLLM can load as described; 1: problems, one per line; 2: not readable."""
    from harness.package import checkpoint, tensors
    from harness.package.ignore import check_ignore, qconfig_problem
    from harness.package.manifest import MANIFEST, verify
    from harness.package.sizes import text_shapes
    from harness.package.source import PackageError

    if not directory.is_dir():
        raise PackageError(f"{directory}: not a directory")
    where = str(directory / "config.json")
    cfg = checkpoint.read_json(directory / "config.json", directory)
    expected = text_shapes(cfg, where)  # checks the config first
    text = cfg.get("text_config", cfg)
    qcfg = cfg.get("quantization_config") or text.get("quantization_config")
    if not qcfg:
        raise PackageError(f"{where}: no quantization_config")
    if qconfig_problem(qcfg):
        raise PackageError(f"{where}: {qconfig_problem(qcfg)}")
    found = checkpoint.tensors(directory)
    shapes = {n: t.shape for n, t in found.items()}
    tied = text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True))
    tied = tied and "lm_head.weight" not in shapes and "lm_head.weight_packed" not in shapes
    result = check_ignore(shapes, qcfg, tied_lm_head=tied)
    problems = list(result.problems)
    problems += tensors.package_problems(found, expected, cfg, qcfg, directory,
                                         lambda info, name: checkpoint.load(info, name, directory))
    for name, info in found.items():
        bad = tensors.non_finite(name, info, directory)
        if bad:
            problems.append(bad)
    if os.path.lexists(directory / MANIFEST):
        problems += verify(directory)
    for line in problems:
        print(line)
    print(f"{directory}: {'ok' if not problems else f'{len(problems)} problem(s)'}; "
          f"{result.quantized_modules} packed modules, {len(result.ignored_16bit_linears)} ignored 16-bit Linears")
    return 0 if not problems else 1


def _sizes(config_path: Path) -> int:
    from harness.package.checkpoint import read_json
    from harness.package.reads import bytes_read_per_token
    from harness.package.resident import load
    from harness.package.sizes import sizes, table_rows, text_shapes
    from harness.package.textconfig import resident_fields, text_config

    where = str(config_path)
    config = read_json(config_path)  # bounded: never a FIFO or /dev/zero
    resident_fields(text_config(config, where), where)  # types and ranges before anything is built
    shapes = text_shapes(config, where)
    rows = table_rows(shapes)
    for name, s in SCHEMES.items():
        z = sizes(shapes, s)
        parts = ", ".join(f"{g} {v / GIB:.3f}" for g, v in z.items() if g != "total")
        read = bytes_read_per_token(z, rows) / GIB
        print(f"{name:5s} {z['total'] / GIB:6.3f} GiB  read/token {read:.3f} GiB  ({parts})")
        r = load(config, s)
        small = (r["runtime"] + r["rounding"]) / GIB
        print(f"      vLLM 0.30.0 holds {r['total'] / GIB:.3f} GiB after load = package "
              f"{r['weight'] / GIB:.3f} + rope caches {r['rope'] / GIB:.4f} + unsplit allocator "
              f"blocks {r['unsplit'] / GIB:.4f} + runtime tensors and rounding {small:.4f}")
    return 0


@one_line_errors("harness.package")
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from harness.package.grid import OffGrid
    from harness.package.source import PackageError

    try:
        if args.command == "build":
            from harness.package.build import build

            s = scheme(args.scheme)
            build(args.source or s.default_source, args.out, s, args.revision, args.work)
            return 0
        if args.command == "start":
            from harness.package.remote import start
            from kit.regions import resolve

            region = resolve(args.region).region  # RegionError is a ValueError: one line, exit 2
            print(f"region {region}", file=sys.stderr)
            return start(args.scheme, args.source, args.revision, region=region)
        if args.command == "check":
            return _check(Path(args.directory))
        return _sizes(Path(args.config))
    except (PackageError, OffGrid, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
