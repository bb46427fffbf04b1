"""The Neuron image's Gemma 4 E2B port is fetched by commit id from NxD Inference (review R5).

Fact recorded in kit/pins.py: the pinned commit is reachable only from a pull request's head
(refs/pull/115/head in a snapshot of aws-neuron/neuronx-distributed-inference; main does not
contain it). A git server hands out a commit by id only while a ref reaches it (and GitHub may
prune it afterwards), so a force-push of the pull request breaks the build months later. The
step must then stop with one line saying how to re-pin. The stand-in below is a local repository
whose pull-request ref is force-pushed and the old commit pruned.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kit import pins
from tests.stacks.test_neuron_install import agent_env, render, step_script

PORT = "contrib/models/gemma-4-E2B/src"
# The port's files at the pinned commit (tests/neuron/vendored_nxdi_0_8/PROVENANCE.md): the kit's patch
# (ami/neuron-port/gemma4-e2b-port.patch) must apply to them as the build applies it.
PINNED_PORT = Path(__file__).resolve().parents[1] / "neuron" / "vendored_nxdi_0_8" / "port"


def git(*args: str, cwd: Path) -> str:
    r = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
                        *args], cwd=cwd, capture_output=True, text=True, check=True)
    return r.stdout.strip()


def make_upstream(tmp_path, port_text: str | None = None):
    """A repository with main and a pull request whose head carries the port (the pinned files, or
    a modeling file with ``port_text``); returns (url, commit)."""
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    (work / "README.md").write_text("nxdi\n")
    git("add", ".", cwd=work)
    git("commit", "-qm", "main", cwd=work)
    git("checkout", "-qb", "pr", cwd=work)
    (work / PORT).mkdir(parents=True)
    for f in PINNED_PORT.glob("*.py"):
        (work / PORT / f.name).write_bytes(f.read_bytes())
    if port_text is not None:
        (work / PORT / "modeling_gemma4_e2b.py").write_text(port_text)
    git("add", ".", cwd=work)
    git("commit", "-qm", "port", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "nxdi.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    git("update-ref", pins.NXDI_REF, commit, cwd=bare)
    git("branch", "-D", "pr", cwd=bare)
    return bare, commit


@pytest.fixture
def upstream(tmp_path):
    return make_upstream(tmp_path)


def run_step(root: Path, url: str, commit: str):
    script = render(step_script("build", "InstallGemma4Port"),
                    {"NxdiRepo": url, "NxdiCommit": commit, "NxdiRef": pins.NXDI_REF}, root)
    return subprocess.run(["bash", "-c", script], env=agent_env(HOME=str(root)), capture_output=True,
                          text=True, timeout=120)


def test_the_port_is_taken_from_the_pinned_commit_of_the_pull_request(upstream, tmp_path):
    bare, commit = upstream
    r = run_step(tmp_path / "root", f"file://{bare}", commit)
    assert r.returncode == 0, r.stderr
    installed = (tmp_path / "root/opt/ami/nxdi-gemma4/src/modeling_gemma4_e2b.py").read_text()
    pinned = (PINNED_PORT / "modeling_gemma4_e2b.py").read_text()
    # the kit's patch is applied: the linear KV cache and full-head RoPE, not the pinned lines
    assert installed != pinned and "sliding_window=None,  # linear cache (see above)" in installed
    assert "rotary_dim = int(head_dim * partial_rotary_factor)" in pinned
    assert "rotary_dim = int(head_dim * partial_rotary_factor)" not in installed
    source = (tmp_path / "root/opt/ami/nxdi-gemma4/SOURCE").read_text().split()
    assert source[:2] == [f"file://{bare}", commit] and source[-1] == "gemma4-e2b-port.patch"


def test_a_port_the_kit_patch_no_longer_applies_to_stops_the_build_in_one_line(tmp_path):
    pinned = (PINNED_PORT / "modeling_gemma4_e2b.py").read_text()
    moved = pinned.replace("class ProportionalRotaryEmbedding(RotaryEmbedding):", "class ProportionalRope(RotaryEmbedding):")
    bare, commit = make_upstream(tmp_path, moved)
    r = run_step(tmp_path / "root", f"file://{bare}", commit)
    assert r.returncode == 1
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert "gemma4-e2b-port.patch" in lines[0] and commit in lines[0] and "make port-check" in lines[0]
    assert not (tmp_path / "root/opt/ami/nxdi-gemma4/src").exists()


def test_a_force_pushed_pull_request_stops_the_build_saying_how_to_re_pin(upstream, tmp_path):
    bare, commit = upstream
    main = git("rev-parse", "main", cwd=bare)
    git("update-ref", pins.NXDI_REF, main, cwd=bare)  # the force-push: the ref no longer reaches the port
    git("reflog", "expire", "--expire=now", "--all", cwd=bare)
    git("gc", "-q", "--prune=now", cwd=bare)
    r = run_step(tmp_path / "root", f"file://{bare}", commit)
    assert r.returncode == 1
    (line,) = [x for x in r.stderr.splitlines() if "Gemma 4 E2B port" in x]
    assert commit in line and pins.NXDI_REF in line and "kit/pins.py" in line and "NeuronImageStack" in line


def test_the_pin_names_the_ref_it_hangs_on():
    assert pins.NXDI_REF.startswith("refs/pull/") and pins.NXDI_REF.endswith("/head")
    assert len(pins.NXDI_COMMIT) == 40
