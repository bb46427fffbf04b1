"""Build a package: check DEST and the source, convert each tensor per the scheme, write, publish.

Before any work, a local DEST is checked without following links (a symlink, a file, /dev/null,
a file as parent, a non-empty or unwritable directory are each one line). Before converting, the
source's tensor set, shapes, dtypes and values are checked against its config.json
(harness.package.tensors). Nothing half-written is left at DEST: a local package is written to a
hidden sibling directory and renamed onto DEST at the end (one atomic rename); an S3 package is
written locally first and uploaded with ``manifest.json`` last (a prefix without a manifest is not
a package). Any failure, a full disk included, removes the work directory and the parent
directories the build created. Every byte of the package is written through ``_save_shard``,
``_write_text`` and ``_copy`` (the write seam a failing disk is tested at).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from harness.package import checkpoint, grid, layout, tensors
from harness.package.ignore import check_ignore
from harness.package.manifest import MANIFEST, manifest_of
from harness.package.reads import bytes_read_per_token
from harness.package.sizes import text_shapes
from harness.package.source import PackageError, Source, resolve
from kit.schemes import GROUPS, Scheme

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
        _save_shard(self.current, path)
        self.written.append((path, list(self.current)))
        self.current, self.size = {}, 0

    def finish(self) -> list[str]:
        self.flush()
        total = len(self.written)
        weight_map = {}
        names = []
        for i, (path, held) in enumerate(self.written):
            final = self.dir / f"model-{i + 1:05d}-of-{total:05d}.safetensors"
            path.rename(final)
            names.append(final.name)
            for t in held:
                weight_map[t] = final.name
        index = {"metadata": {"total_size": sum((self.dir / n).stat().st_size for n in names)},
                 "weight_map": dict(sorted(weight_map.items()))}
        _write_text(self.dir / checkpoint.INDEX, json.dumps(index, indent=2) + "\n")
        return names


class WriteFailed(PackageError):
    """Writing the package failed (a full disk, a file size limit, an I/O error)."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


# The write seam: every file of a package is written by one of these three.
def _save_shard(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' save_file. It reports an I/O failure as a SafetensorError, e.g. "Error while
    serializing: I/O error: File too large (os error 27)" (safetensors 0.8.0, seen under a file
    size limit), and removes its own partial file."""
    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except SafetensorError as e:
        m = re.search(r"\(os error (\d+)\)", str(e))
        raise WriteFailed(path, os.strerror(int(m.group(1))) if m else str(e).splitlines()[0]) from None


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise WriteFailed(path, e.strerror or str(e)) from None


def _copy(src: Path, dst: Path) -> None:
    try:
        shutil.copyfile(src, dst)
    except OSError as e:
        raise WriteFailed(dst, e.strerror or str(e)) from None


def _load(src: Source, name: str) -> torch.Tensor:
    return checkpoint.load(src.tensors[name], name, src.dir)


def _int4_groups(s: Scheme) -> set[str]:
    groups = {g for g in ("linear", "per_layer_embeddings", "token_embeddings") if s.format_of(g) == "int4"}
    return groups | ({"lm_head"} if s.untied_lm_head else set())


def check_source(src: Source, s: Scheme, log=print) -> None:
    """Refuse, before converting anything, a source whose tensors do not match what its config
    implies (names, shapes, dtypes, an untied config's lm_head) or that holds NaN/inf; one line
    naming the first problem."""
    expected = text_shapes(src.config, str(src.dir / "config.json"))
    mm = layout.is_multimodal(src.tensors)
    found = {}
    for n, info in src.tensors.items():
        p = layout.package_name(n, mm)
        if p is not None:
            found[p] = (n, info)
    problems = tensors.source_problems(found, expected, src.config, _int4_groups(s))
    if problems:
        more = f" ({len(problems) - 1} more problem(s) after this one)" if len(problems) > 1 else ""
        raise PackageError(problems[0] + more)
    for p, (n, info) in found.items():
        bad = tensors.non_finite(n, info, src.dir)
        if bad:
            raise PackageError(bad)
    log(f"source checked: {len(found)} text tensors named and shaped as config.json implies, all finite")


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
    check_source(src, s, log)
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
    _write_text(work / "config.json", json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for f in src.carried_files():
        _copy(f, work / f.name)

    for t in tables.values():
        share = f"{t.bit_identical / t.values:.2%} bit-identical" if t.values else "copied as is"
        log(f"{t.name}: {_size(t.bytes_before)} -> {_size(t.bytes_after)} {t.fmt}; "
            f"{t.off_grid_groups} off-grid groups; {share}")
    for n in notes:
        log(n)
    log(f"total {_size(sum(before.values()))} -> {_size(sum(after.values()))} "
        f"({len(files)} safetensors file(s)); ignore check ok ({check.quantized_modules} packed modules)")
    manifest = manifest_of(work, src, s, before, after, [t.as_dict() for t in tables.values()],
                           check.as_dict(), notes, CT_VERSION, bytes_read_per_token(after, rows))
    _write_text(work / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _size(n: int) -> str:
    return f"{n / GIB:.3f} GiB" if n >= GIB // 100 else f"{n / 2**20:.3f} MiB"


def check_dest(out: str) -> Path:
    """A local DEST, checked before any work and without following a link at DEST itself: it
    must not exist or be an empty directory, and its nearest existing ancestor must be a directory
    this process can create entries in (probed: as root, permission bits say little)."""
    dest = Path(out)
    if not out.strip() or dest.name in ("", ".", ".."):
        raise PackageError(f"--out {out!r}: name a new directory (or s3://bucket/prefix)")
    try:
        st = os.lstat(dest)
    except (FileNotFoundError, NotADirectoryError):
        st = None  # a file among the ancestors is named below
    except OSError as e:
        raise PackageError(f"--out {out}: {e.strerror or type(e).__name__}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise PackageError(f"--out {out}: a symbolic link (to {os.readlink(dest)}); the build renames its "
                               "finished package onto DEST and does not follow links: name a new directory")
        if not stat.S_ISDIR(st.st_mode):
            raise PackageError(f"--out {out}: exists and is not a directory; choose a new directory")
        with os.scandir(dest) as entries:
            if any(True for _ in entries):
                raise PackageError(f"--out {out}: already exists and is not empty; choose a new directory")
    probe = dest.parent
    while True:
        try:
            pst = os.stat(probe)  # ancestors may be links (a linked home directory is ordinary)
            break
        except (FileNotFoundError, NotADirectoryError):
            if probe == probe.parent:
                raise PackageError(f"--out {out}: no existing directory above it") from None
            probe = probe.parent
        except OSError as e:
            raise PackageError(f"--out {out}: {probe}: {e.strerror or type(e).__name__}") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise PackageError(f"--out {out}: {probe} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=probe))
    except OSError as e:
        raise PackageError(f"--out {out}: cannot create directories in {probe} "
                           f"({e.strerror or type(e).__name__})") from None
    return dest


def _make_parents(d: Path) -> list[Path]:
    """mkdir -p ``d``; the directories it created, deepest first (removed again on failure)."""
    missing = []
    while not os.path.lexists(d):
        missing.append(d)
        d = d.parent
    for m in reversed(missing):
        m.mkdir()
    return missing


def _remove_empty(dirs: list[Path]) -> None:
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            break


def build(source: str, out: str, scheme: Scheme, revision: str | None = None, work_root: str | None = None,
          log=print) -> dict:
    """Build ``scheme`` from ``source`` into ``out`` (a directory or s3://bucket/prefix)."""
    s3 = out.startswith("s3://")
    created: list[Path] = []
    if s3:
        from harness.package.publish import parse_s3, refuse_existing

        bucket, prefix = parse_s3(out)
        refuse_existing(bucket, prefix)
        where = f"the work directory in {work_root or tempfile.gettempdir()}"
        try:
            work = Path(tempfile.mkdtemp(prefix="package-", dir=work_root))
        except OSError as e:
            raise PackageError(f"--work {work_root}: cannot create a directory there ({e.strerror})") from None
    else:
        dest = check_dest(out)
        where = f"--out {out}"
        try:
            created = _make_parents(dest.parent)
            work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
        except OSError as e:
            _remove_empty(created)
            raise PackageError(f"--out {out}: cannot create {e.filename or dest.parent} ({e.strerror})") from None
    placed = False
    try:
        src = resolve(source, revision)
        log(f"source {src.id} revision {src.revision}; scheme {scheme.name}: {scheme.summary}")
        manifest = convert(src, scheme, work, log)
        if s3:
            from harness.package.publish import upload

            upload(work, bucket, prefix, log)
        else:
            try:  # one atomic rename; it replaces an empty directory and refuses anything else
                os.rename(work, dest)
            except OSError as e:
                placed = True  # the finished package stays where it is; say so
                raise PackageError(f"--out {out}: changed during the build ({e.strerror}); the finished package "
                                   f"is kept in {work}") from None
            placed = True
    except WriteFailed as e:
        raise PackageError(f"{where}: {e.reason} while writing {e.path.name}; the partial package was removed, "
                           f"nothing was written at {out}") from None
    finally:
        if not placed:
            shutil.rmtree(work, ignore_errors=True)
            _remove_empty(created)
    return manifest


def eprint(msg: str) -> None:
    print(msg, file=sys.stderr)
