"""Build a package: read the source, convert each tensor per the scheme, write, check, publish.

Nothing half-written is left at DEST: a local package is written to a hidden sibling directory
and renamed onto DEST at the end; an S3 package is written locally first and uploaded with
``manifest.json`` last (a prefix without a manifest is not a package). Any failure removes the
work directory.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from harness.package import grid, layout
from harness.package.ignore import check_ignore
from harness.package.manifest import write_manifest
from harness.package.reads import bytes_read_per_token
from kit.schemes import GROUPS, Scheme
from harness.package.source import PackageError, Source, resolve

GIB = 2**30
SHARD_BYTES = 2 * GIB
ROW_CHUNK_VALUES = 1 << 23  # values recovered per step (bounds the float64 working set)
CT_VERSION = "0.17.0"  # compressed-tensors release vLLM 0.30.0 pins (its PyPI metadata; tests/package/test_vllm_pin.py)


@dataclass
class Table:
    name: str
    group: str
    fmt: str
    bytes_before: int
    bytes_after: int = 0
    off_grid_groups: int = 0
    bit_identical: int = 0
    values: int = 0

    def as_dict(self) -> dict:
        share = self.bit_identical / self.values if self.values else None
        return {"name": self.name, "group": self.group, "format": self.fmt,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "off_grid_groups": self.off_grid_groups, "bit_identical_share": share}


@dataclass
class Shards:
    dir: Path
    current: dict[str, torch.Tensor] = field(default_factory=dict)
    size: int = 0
    written: list[tuple[Path, list[str]]] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def add(self, name: str, t: torch.Tensor) -> int:
        t = t.contiguous()
        self.current[name] = t
        self.shapes[name] = tuple(t.shape)
        n = t.numel() * t.element_size()
        self.size += n
        if self.size >= SHARD_BYTES:
            self.flush()
        return n

    def flush(self) -> None:
        if not self.current:
            return
        path = self.dir / f"shard-{len(self.written):05d}.safetensors"
        save_file(self.current, str(path), metadata={"format": "pt"})
        self.written.append((path, list(self.current)))
        self.current, self.size = {}, 0

    def finish(self) -> list[str]:
        self.flush()
        total = len(self.written)
        weight_map = {}
        names = []
        for i, (path, tensors) in enumerate(self.written):
            final = self.dir / f"model-{i + 1:05d}-of-{total:05d}.safetensors"
            path.rename(final)
            names.append(final.name)
            for t in tensors:
                weight_map[t] = final.name
        index = {"metadata": {"total_size": sum((self.dir / n).stat().st_size for n in names)},
                 "weight_map": dict(sorted(weight_map.items()))}
        (self.dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        return names


def _load(src: Source, name: str) -> torch.Tensor:
    with safe_open(str(src.files[name]), framework="pt") as f:
        return f.get_tensor(name)


@dataclass
class Packed:
    """A tensor as written: int32-packed integers, bf16 scales, and how many values round-trip."""

    packed: torch.Tensor
    scale: torch.Tensor
    shape: tuple[int, int]
    bit_identical: int
    values: int


def _int4(w: torch.Tensor, name: str) -> Packed:
    """Recover and pack a tensor's grid in row chunks (bounded memory even for the 262144 x 8960
    per-layer table); report the tensor's first off-grid group and how many there are."""
    rows, cols = w.shape
    step = max(1, ROW_CHUNK_VALUES // max(cols, 1))
    ps, ss, same, first_bad, bad = [], [], 0, None, 0
    for r0 in range(0, rows, step):
        try:
            part = grid.recover_int4(w[r0:r0 + step], name)
        except grid.OffGrid as e:
            bad += e.count
            first_bad = first_bad or (r0 + e.row, e.group)
            continue
        if not bad:
            ps.append(grid.pack_int32(part.q, 4))
            ss.append(part.scale)
        same += part.bit_identical
    if bad:
        raise grid.OffGrid(name, first_bad[0], first_bad[1], bad)
    return Packed(torch.cat(ps), torch.cat(ss), (rows, cols), same, w.numel())


def _int8(w: torch.Tensor, name: str) -> Packed:
    qt = grid.round_int8_per_channel(w, name)
    return Packed(grid.pack_int32(qt.q, 8), qt.scale, tuple(w.shape), qt.bit_identical, qt.values)


def _write_quantized(shards: Shards, module: str, p: Packed) -> int:
    n = shards.add(f"{module}.weight_packed", p.packed)
    n += shards.add(f"{module}.weight_scale", p.scale)
    n += shards.add(f"{module}.weight_shape", torch.tensor(list(p.shape), dtype=torch.int64))
    return n


def plan(src: Source, s: Scheme) -> tuple[list[tuple[str, str]], bool, list[str]]:
    """(source name, package name) pairs to write, whether lm_head is tied, and notes."""
    names = list(src.files)
    mm = layout.is_multimodal(names)
    tie = (src.config.get("text_config") or src.config).get("tie_word_embeddings",
                                                             src.config.get("tie_word_embeddings", True))
    pairs, notes, dropped = [], [], 0
    for n in sorted(names):
        p = layout.package_name(n, mm)
        if p is None:
            dropped += 1
            continue
        if p == layout.LM_HEAD and tie:
            notes.append("dropped lm_head.weight: the config ties it to the token embeddings (a duplicate)")
            continue
        pairs.append((n, p))
    if dropped:
        notes.append(f"dropped {dropped} tower tensors (vision/audio): the package is text only")
    if not any(p == layout.EMBED for _, p in pairs):
        raise PackageError(f"{src.id}: no token embedding table ({layout.EMBED} or its multimodal name)")
    return pairs, bool(tie), notes


def convert(src: Source, s: Scheme, work: Path, log=print) -> dict:
    """Write the package into ``work``; return the manifest."""
    problem = src.serving_problem()  # before the packing, not after it
    if problem:
        raise PackageError(problem)
    pairs, tied_source, notes = plan(src, s)
    shards = Shards(work)
    tables: dict[str, Table] = {}
    before = dict.fromkeys(GROUPS, 0)
    after = dict.fromkeys(GROUPS, 0)
    ignore: list[str] = []
    rows: dict[str, int] = {}
    embed_q: Packed | None = None
    source_untied_head = not tied_source and any(p == layout.LM_HEAD for _, p in pairs)

    for i, (sname, pname) in enumerate(pairs, 1):
        if i == 1 or i % 50 == 0 or not pname.startswith("model.layers."):  # progress for the build's log
            log(f"[{i}/{len(pairs)}] {pname}")
        w = _load(src, sname)
        shape = tuple(w.shape)
        g = layout.group_of(pname, shape)
        fmt = s.format_of(g) if g != "lm_head" else ("int4" if s.untied_lm_head else "bf16")
        nbytes = w.numel() * w.element_size()
        before[g] += nbytes
        if g in ("token_embeddings", "per_layer_embeddings"):
            rows[g] = shape[0]
        key = {"linear": f"linear ({s.linear})", "other": "other (norms, scalars)"}.get(g, pname)
        t = tables.setdefault(key, Table(key, g, fmt, 0))
        t.bytes_before += nbytes
        module = layout.module_of(pname)
        if len(shape) > 2:
            raise PackageError(f"{sname}: a {len(shape)}-D weight (mixture-of-experts experts); this builder packs "
                               "dense Gemma 4 checkpoints only (E2B, E4B, 12B, 31B), not 26B A4B")
        if fmt == "bf16" or g == "other":
            n = shards.add(pname, w)
            if g in ("linear", "lm_head"):
                ignore.append(module)
        elif fmt == "int4":
            if s.source_kind != "qat":
                raise PackageError(f"scheme {s.name}: int4 needs a QAT source")
            qt = _int4(w, sname)
            n = _write_quantized(shards, module, qt)
            t.bit_identical += qt.bit_identical
            t.values += qt.values
            if pname == layout.EMBED:
                embed_q = qt
        elif fmt == "int8":
            qt = _int8(w, sname)
            n = _write_quantized(shards, module, qt)
            t.bit_identical += qt.bit_identical
            t.values += qt.values
        else:
            raise PackageError(f"{pname}: no writer for format {fmt!r}")
        after[g] += n
        t.bytes_after += n
        del w

    if s.untied_lm_head and not source_untied_head:
        # The untied int4 lm_head: the embedding's own integers and scales, stored once more.
        if embed_q is None:
            raise PackageError(f"scheme {s.name}: an untied int4 lm_head needs int4 token embeddings")
        head = Packed(embed_q.packed.clone(), embed_q.scale.clone(), embed_q.shape, embed_q.bit_identical,
                      embed_q.values)
        n = _write_quantized(shards, "lm_head", head)
        after["lm_head"] += n
        tables["lm_head.weight"] = Table("lm_head.weight", "lm_head", "int4", 0, n, 0,
                                         embed_q.bit_identical, embed_q.values)
        notes.append("lm_head: untied int4 copy of the token embedding's integers and scales")
    tied_package = not s.untied_lm_head and not source_untied_head
    if tied_package:
        ignore.append("lm_head")

    files = shards.finish()
    qconfig = layout.quantization_config(s, sorted(set(ignore)), CT_VERSION)
    check = check_ignore(shards.shapes, qconfig, tied_lm_head=tied_package)
    if not check.ok:
        raise PackageError("ignore list check failed: " + "; ".join(check.problems))
    cfg = layout.text_config(src.config, s, qconfig)
    (work / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for f in src.carried_files():
        shutil.copyfile(f, work / f.name)

    for t in tables.values():
        share = f"{t.bit_identical / t.values:.2%} bit-identical" if t.values else "copied as is"
        log(f"{t.name}: {_size(t.bytes_before)} -> {_size(t.bytes_after)} {t.fmt}; "
            f"{t.off_grid_groups} off-grid groups; {share}")
    for n in notes:
        log(n)
    log(f"total {_size(sum(before.values()))} -> {_size(sum(after.values()))} "
        f"({len(files)} safetensors file(s)); ignore check ok ({check.quantized_modules} packed modules)")
    return write_manifest(work, src, s, before, after, [t.as_dict() for t in tables.values()],
                          check.as_dict(), notes, CT_VERSION, bytes_read_per_token(after, rows))


def _size(n: int) -> str:
    return f"{n / GIB:.3f} GiB" if n >= GIB // 100 else f"{n / 2**20:.3f} MiB"


def build(source: str, out: str, scheme: Scheme, revision: str | None = None, work_root: str | None = None,
          log=print) -> dict:
    """Build ``scheme`` from ``source`` into ``out`` (a directory or s3://bucket/prefix)."""
    s3 = out.startswith("s3://")
    if s3:
        from harness.package.publish import parse_s3, refuse_existing

        bucket, prefix = parse_s3(out)
        refuse_existing(bucket, prefix)
        work = Path(tempfile.mkdtemp(prefix="package-", dir=work_root))
    else:
        dest = Path(out)
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise PackageError(f"--out {out}: already exists and is not empty; choose a new directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        src = resolve(source, revision)
        log(f"source {src.id} revision {src.revision}; scheme {scheme.name}: {scheme.summary}")
        manifest = convert(src, scheme, work, log)
        if s3:
            from harness.package.publish import upload

            upload(work, bucket, prefix, log)
        else:
            if dest.exists():
                dest.rmdir()
            work.rename(dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if s3:
        shutil.rmtree(work, ignore_errors=True)
    return manifest


def eprint(msg: str) -> None:
    print(msg, file=sys.stderr)
