"""The port check (tests/neuron/port_check.py, `make port-check`) passes on the port with the kit's
patch, fails on the port as pinned where the two defects are, and runs the port's own file.

One run of the check (about a minute here, two on a busy machine): the patched port, the port as pinned and the patched port
with one line changed back (the KV-cache manager given the sliding window again), all against one
transformers reference. Which case fails tells which defect it saw:

- ``global-layers`` encodes prompts inside the window with no token generation, so only the global
  layers' RoPE can make it fail; it fails on the pinned port and passes with one KV line reverted.
- ``long-context`` and ``slots`` generate past the window; with the RoPE fixed and the KV cache
  rolling again (the one-line change) they fail from the first decode positions past the window.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the port check needs torch")
pytest.importorskip("transformers", reason="the port check needs transformers")

from tests.neuron import port_check as pc

ROOT = Path(__file__).resolve().parents[2]
KV_LINE = "sliding_window=None,  # linear cache (see above)"


def check(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.neuron.port_check", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """One run of the check, the text report and the figures (--json-file) of the same run: the
    reference and the three ports take a minute or more, so every test here reads this one."""
    figures = tmp_path_factory.mktemp("port-check") / "figures.json"
    r = check("--json-file", str(figures), "--also-unpatched", "--also-mutated", KV_LINE,
              "sliding_window=self.sliding_window,")
    assert r.returncode == 1, r.stderr[-3000:]  # the unpatched and mutated variants disagree
    return r, json.loads(figures.read_text())


@pytest.fixture(scope="module")
def variants(run) -> dict:
    return {v["label"]: {c["name"]: c for c in v["cases"]} for v in run[1]["variants"]}


def test_the_patched_port_agrees_with_transformers_past_the_window(variants):
    patched = variants["patched"]
    assert list(patched) == ["global-layers", "context", "long-context", "slots", "device-sampling"]
    for case in patched.values():
        assert case["ok"] and case["bad_positions"] == 0 and case["max_diff"] < pc.TOLERANCE, case
    # NxD Inference's own sampler with per-row parameters: the greedy row is the argmax, the
    # top-k-2 row stays in the best two and leaves the argmax at least once
    assert patched["device-sampling"]["positions"] == pc.DECODE_STEPS
    # the generation cases reach 3 windows past their prompts, and past the window at all
    assert patched["long-context"]["positions"] == 1 + pc.DECODE_STEPS >= 3 * pc.WINDOW
    assert pc.ONE_PROMPT > pc.WINDOW and max(pc.SLOT_PROMPTS) + pc.DECODE_STEPS > 5 * pc.WINDOW


def test_the_pinned_port_fails_on_both_defects(variants):
    pinned = variants["unpatched"]
    assert not pinned["global-layers"]["ok"] and not pinned["long-context"]["ok"]
    # RoPE: visible from the second position of a prompt shorter than the window, no decode involved
    assert pinned["global-layers"]["first_bad"] == 1
    assert all(c["max_diff"] > 0.1 for c in pinned.values())


def test_one_line_of_the_patched_file_changes_the_result(variants):
    """The check runs the staged file: giving the KV-cache manager the window again (the pinned
    line) makes token generation past the window read the wrong K/V, and nothing else."""
    mutated = variants["mutated"]
    assert mutated["global-layers"]["ok"] and mutated["context"]["ok"]
    assert not mutated["long-context"]["ok"] and not mutated["slots"]["ok"]
    # the first differing position is a decode step, past the window
    assert mutated["long-context"]["first_bad"] >= pc.ONE_PROMPT > pc.WINDOW


def test_the_text_report_and_exit_codes(run):
    r, _ = run
    assert r.returncode == 1
    blocks = r.stdout.split("port-check: ")[1:]
    pinned = next(b for b in blocks if b.startswith("the port as pinned"))
    rows = [line for line in pinned.splitlines() if line.startswith("  FAIL")]
    assert {row.split()[1] for row in rows} == {"global-layers", "context", "long-context", "slots"}
    assert all("max |logit diff|" in row and "first differing position" in row for row in rows)
    said = [line for line in r.stderr.splitlines() if line.startswith("port-check: the port as pinned")]
    assert said == ["port-check: the port as pinned (no patch) disagrees with transformers in: "
                    "global-layers, context, long-context, slots"]
    assert not any("the port with ami/neuron-port" in line for line in r.stderr.splitlines())  # patched: ok


def test_kit_port_patch_chooses_the_port_run_first():
    assert [v["label"] for v in pc.variants_for("off", True, None)] == ["unpatched"]  # off: the port as pinned
    assert [v["label"] for v in pc.variants_for("on", True, ("a", "b"))] == ["patched", "unpatched", "mutated"]
    with pytest.raises(pc.PortCheckError):
        pc.variants_for("maybe", False, None)


def test_bad_settings_are_one_line():
    r = check(KIT_PORT_PATCH="maybe")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "KIT_PORT_PATCH='maybe'" in r.stderr
    r = check("--also-mutated", "no such line", "x")  # found before the reference is built: quick
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such line" in r.stderr


def test_a_patch_that_does_not_apply_is_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "bad.patch"
    bad.write_text((ROOT / "ami/neuron-port/gemma4-e2b-port.patch").read_text().replace(
        "class ProportionalRotaryEmbedding(RotaryEmbedding):", "class Elsewhere(RotaryEmbedding):"))
    monkeypatch.setattr(pc, "PATCH", bad)
    with pytest.raises(pc.PortCheckError) as e:
        pc.stage_port(tmp_path / "port", True)
    assert "does not apply to the pinned port" in str(e.value) and "\n" not in str(e.value)
