"""``build --out DEST``: DEST is checked without following links before any
work, and a disk that fills mid-build is one line and leaves nothing at DEST.

DESTS is a table of destinations that cannot take a package (a symlink to an empty directory, a
dangling or looping link, a file, /dev/null, a FIFO, a file as parent, an unwritable parent...):
each is refused before the source is even read (the build prints its "source ..." line once it
has read the source, which must not appear), in one line, and what DEST points at is untouched.
WRITE_FAULTS inject ENOSPC at each file the build writes (the write seam: ``_save_shard``,
``_write_text``, ``_copy``, through the calls they make: safetensors' save_file,
Path.write_text, shutil.copyfile), and one test lets the kernel refuse the writes for real
(RLIMIT_FSIZE, in a child process): one line naming the file, exit 2, no DEST, no partial
directory beside it, no parent directory the build made.
"""
from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors import SafetensorError  # noqa: E402

from tests.package import tiny  # noqa: E402
from tests.package.hostile import ROOT, one_line, run  # noqa: E402


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("src") / "qat"
    tiny.make_checkpoint(d)
    return d


def _victim(tmp_path):
    v = tmp_path / "victim"
    v.mkdir()
    (v / "keep.txt").write_text("keep")
    return v


# id: (make DEST under tmp_path -> the --out string, words in the line)
def _link_to_empty_dir(t):
    (t / "empty").mkdir()
    os.symlink(t / "empty", t / "out")
    return str(t / "out")


def _dangling(t):
    os.symlink(t / "nowhere", t / "out")
    return str(t / "out")


def _link_to_file(t):
    (t / "f").write_text("keep")
    os.symlink(t / "f", t / "out")
    return str(t / "out")


def _link_loop(t):
    os.symlink(t / "out", t / "out")
    return str(t / "out")


def _link_to_victim(t):
    os.symlink(_victim(t), t / "out")
    return str(t / "out")


def _file(t):
    (t / "out").write_text("keep")
    return str(t / "out")


def _fifo(t):
    os.mkfifo(t / "out")
    return str(t / "out")


def _file_parent(t):
    (t / "f").write_text("keep")
    return str(t / "f" / "out")


def _file_grandparent(t):
    (t / "f").write_text("keep")
    return str(t / "f" / "a" / "out")


def _link_to_file_parent(t):
    (t / "f").write_text("keep")
    os.symlink(t / "f", t / "lnk")
    return str(t / "lnk" / "out")


def _not_empty(t):
    _victim(t)
    return str(t / "victim")


def _only_a_hidden_file(t):
    (t / "out").mkdir()
    (t / "out" / ".x").write_text("keep")
    return str(t / "out")


def _read_only_parent(t):
    (t / "ro").mkdir()
    os.chmod(t / "ro", 0o555)
    return str(t / "ro" / "out")


DESTS = {
    "symlink to an empty directory": (_link_to_empty_dir, ["symbolic link"]),
    "dangling symlink": (_dangling, ["symbolic link"]),
    "symlink to a file": (_link_to_file, ["symbolic link"]),
    "symlink to itself": (_link_loop, ["symbolic link"]),
    "symlink to a full directory": (_link_to_victim, ["symbolic link"]),
    "a regular file": (_file, ["exists and is not a directory"]),
    "a FIFO": (_fifo, ["exists and is not a directory"]),
    "/dev/null": (lambda t: "/dev/null", ["exists and is not a directory"]),
    "/dev/zero": (lambda t: "/dev/zero", ["exists and is not a directory"]),
    "a file as parent": (_file_parent, ["is not a directory"]),
    "a file as grandparent": (_file_grandparent, ["is not a directory"]),
    "a link to a file as parent": (_link_to_file_parent, ["is not a directory"]),
    "/dev/null as parent": (lambda t: "/dev/null/pkg", ["/dev/null is not a directory"]),
    "a directory that is not empty": (_not_empty, ["not empty"]),
    "a directory with only a hidden file": (_only_a_hidden_file, ["not empty"]),
    "an empty string": (lambda t: "", ["name a new directory"]),
    "blank": (lambda t: "  ", ["name a new directory"]),
    ".": (lambda t: ".", ["name a new directory"]),
    "..": (lambda t: "..", ["name a new directory"]),
    "a path ending in /..": (lambda t: str(t / "a" / ".."), ["name a new directory"]),
    "under /proc (no one may create there)": (lambda t: "/proc/inference-kit-package", ["cannot create directories in /proc"]),
    "a read-only parent": (_read_only_parent, ["cannot create directories in"]),
}


def _snapshot(t: Path) -> dict:
    """Every path under ``t`` and what it is (a link's target, a file's bytes)."""
    out = {}
    for p in sorted(t.rglob("*")):
        if p.is_symlink():
            out[str(p)] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p)] = ("file", p.read_bytes())
        else:
            out[str(p)] = ("other", p.is_dir())
    return out


@pytest.mark.parametrize("case", sorted(DESTS))
def test_a_dest_that_cannot_take_a_package_is_refused_before_any_work(source, tmp_path, capsys, monkeypatch, case):
    make, words = DESTS[case]
    if case == "a read-only parent" and os.geteuid() == 0:
        pytest.skip("root may create files in a 0555 directory; the /proc row covers an unwritable parent as root")
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.chdir(work)
    out = make(work)
    before = _snapshot(work)
    rc, stdout, err = run(["build", "--source", str(source), "--out", out], capsys)
    line = one_line(rc, err)
    for w in words:
        assert w in line, line
    assert "source " not in stdout  # the source was not even read
    assert _snapshot(work) == before  # nothing created, nothing followed, nothing removed
    if case == "a read-only parent":
        os.chmod(work / "ro", 0o755)


def test_an_empty_existing_directory_is_still_a_fine_dest(source, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    rc, stdout, err = run(["build", "--source", str(source), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_dest_under_a_linked_directory_is_fine(source, tmp_path, capsys):
    """Only DEST itself is never followed; a parent reached through a link (a linked home) is ordinary."""
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "home")
    rc, _, err = run(["build", "--source", str(source), "--out", str(tmp_path / "home" / "pkgs" / "emb4")], capsys)
    assert rc == 0, err
    assert (tmp_path / "real" / "pkgs" / "emb4" / "manifest.json").is_file()


# -- a disk that fills mid-build -----------------------------------------------------------------

ENOSPC = os.strerror(errno.ENOSPC)


def _full_save_file(tensors, path, metadata=None):
    # what safetensors 0.8.0 raises when the write fails (its message for EFBIG, seen under
    # RLIMIT_FSIZE: "Error while serializing: I/O error: File too large (os error 27)")
    raise SafetensorError(f"Error while serializing: I/O error: {ENOSPC} (os error {errno.ENOSPC})")


def _full_for(name):
    real = Path.write_text

    def write_text(self, data, *a, **k):
        if self.name == name and ".partial-" in str(self.parent.name):
            with open(self, "w") as f:  # a partial file, as a filling disk leaves it
                f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, ENOSPC)
        return real(self, data, *a, **k)
    return write_text


def _full_copy(src, dst, *a, **k):
    Path(dst).write_bytes(b"par")
    raise OSError(errno.ENOSPC, ENOSPC, str(dst))


WRITE_FAULTS = {  # where the disk fills: (patch target, replacement, file named in the line)
    "first shard": ("harness.package.build.save_file", _full_save_file, "shard-00000.safetensors"),
    "index": ("pathlib.Path.write_text", _full_for("model.safetensors.index.json"), "model.safetensors.index.json"),
    "config.json": ("pathlib.Path.write_text", _full_for("config.json"), "config.json"),
    "a tokenizer file": ("shutil.copyfile", _full_copy, "chat_template.jinja"),
    "manifest.json (the last file)": ("pathlib.Path.write_text", _full_for("manifest.json"), "manifest.json"),
}


@pytest.mark.parametrize("case", sorted(WRITE_FAULTS))
def test_a_full_disk_mid_build_is_one_line_and_leaves_nothing(source, tmp_path, capsys, monkeypatch, case):
    target, fake, fname = WRITE_FAULTS[case]
    monkeypatch.setattr(target, fake)
    out = tmp_path / "made" / "by" / "build" / "emb4"
    rc, stdout, err = run(["build", "--source", str(source), "--out", str(out)], capsys)
    line = one_line(rc, err)
    assert ENOSPC in line and fname in line and "nothing was written at" in line, line
    assert not (tmp_path / "made").exists()  # no DEST, no partial directory, no parents it made
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_on_an_s3_build_names_the_work_directory(source, tmp_path, capsys, monkeypatch):
    import harness.package.publish as publish

    monkeypatch.setattr(publish, "refuse_existing", lambda bucket, prefix: None)
    monkeypatch.setattr("harness.package.build.save_file", _full_save_file)
    rc, _, err = run(["build", "--source", str(source), "--out", "s3://b/p", "--work", str(tmp_path)], capsys)
    line = one_line(rc, err)
    assert "work directory" in line and ENOSPC in line
    assert list(tmp_path.iterdir()) == []


def test_the_kernel_refusing_writes_for_real_is_one_line(source, tmp_path):
    """No injection: the child may write files of at most 4 KiB (RLIMIT_FSIZE, SIGXFSZ ignored),
    so the real writes fail with EFBIG inside safetensors or Python."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "pkgs" / "emb4"
    r = subprocess.run([sys.executable, "-m", "harness.package", "build", "--source", str(source), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    line = one_line(r.returncode, r.stderr)
    assert os.strerror(errno.EFBIG) in line and "nothing was written at" in line, line
    assert not (tmp_path / "pkgs").exists()


def test_dest_changed_during_the_build_keeps_the_finished_package(source, tmp_path, capsys, monkeypatch):
    """The last step is one rename; if DEST became something else meanwhile, that rename fails,
    DEST is not touched, and the finished package is kept and named."""
    import harness.package.build as b

    out = tmp_path / "out"
    real = b.convert

    def convert_then_plant(src, s, work, log):
        m = real(src, s, work, log)
        os.symlink(tmp_path / "elsewhere", out)
        return m

    monkeypatch.setattr(b, "convert", convert_then_plant)
    rc, _, err = run(["build", "--source", str(source), "--out", str(out)], capsys)
    line = one_line(rc, err)
    assert "changed during the build" in line
    kept = Path(line.rsplit("kept in ", 1)[1])
    assert (kept / "manifest.json").is_file()
    assert os.readlink(out) == str(tmp_path / "elsewhere")
    shutil.rmtree(kept)


def test_the_write_seam_is_the_only_writer():
    """Every file a package holds is written through _save_shard, _write_text or _copy (so the
    faults above reach every write): outside those three, the build module calls no writer."""
    import inspect

    import harness.package.build as b

    rest = inspect.getsource(b)
    for fn in (b._save_shard, b._write_text, b._copy):
        rest = rest.replace(inspect.getsource(fn), "")
    for call in ("save_file(", ".write_text(", ".write_bytes(", "copyfile(", "open(", "copy2(", "copytree("):
        assert call not in rest, f"the build writes with {call} outside the seam"
