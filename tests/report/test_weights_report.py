"""The report compares what each backend served (meta.json ``weights``, harness/run/weights.py).

Two backends of one model at two commits: the report opens with the warning naming both commits,
the weights table shows each, and the speed, latency, cost and accuracy captions say so beside
the figures. The same commit: no warning. Same commit and precision with other config/tokenizer
files: flagged too. A commit not known on one of them: said, not flagged. Bedrock: another model.
"""
from __future__ import annotations

import json

from harness.report import render
from harness.results import write_file
from kit.contracts.results import META
from tests.report.synthetic import make_results

E2B = "google/gemma-4-E2B-it"
OLD, NEW = "1a" * 20, "2b" * 20
DIGEST_A, DIGEST_B = "a" * 64, "b" * 64


def _run(tmp_path, weights: dict):
    run = make_results(tmp_path, versioned=True)
    meta = json.loads((run / "meta.json").read_text())
    meta.pop("schema_version")
    write_file(run / "meta.json", META, {**meta, "weights": weights})
    md, html = render(run)
    return md.read_text(), html.read_text()


def _w(revision: str | None, how: str = "pinned", digest: str = DIGEST_A, precision: str = "bf16", **kw) -> dict:
    w = {"model": E2B, "served_as": E2B, "how": how, "digest": digest, "precision": precision,
         "source": "instance /etc/inference-kit/served-model.json", **kw}
    if revision:
        w["revision"] = revision
    return w


BEDROCK = {"model": "us.amazon.nova-micro-v1:0", "different_model": True, "source": "Bedrock (managed)"}


def test_two_commits_of_one_model_are_flagged_with_both(tmp_path):
    md, html = _run(tmp_path, {"g5g": _w(NEW, how="resolved", precision="fp16"), "inf2": _w(OLD, how="image"),
                               "bedrock": BEDROCK})
    top = md.split("## ", 1)[0]
    assert f"Not the same weights: {E2B} was served at 2 commits" in top
    assert f"g5g at {NEW[:12]} (resolved)" in top and f"inf2 at {OLD[:12]} (image)" in top
    assert "Not the same weights" in html.split("<section", 1)[0]
    table = md.split("## Weights served", 1)[1].split("## ", 1)[0]
    assert f"| g5g | {E2B} | {NEW[:12]} | resolved | fp16 |" in table
    assert f"| inf2 | {E2B} | {OLD[:12]} | image | bf16 |" in table
    assert "another model" in table.split("| bedrock |", 1)[1].split("\n", 1)[0]
    # beside the cross-backend figures
    from harness.report.accuracy import TITLE as ACCURACY

    for title in ("Decode speed against the roofline", "Latency against throughput", "Cost per million output tokens",
                  ACCURACY):
        caption = md.split(f"## {title}", 1)[1].split("|", 1)[0]
        assert "Not the same weights across these backends" in caption, title
    speed = md.split("## Decode speed against the roofline", 1)[1].split("## ", 1)[0]
    inf2_row = next(line for line in speed.splitlines() if line.startswith("| inf2 "))
    assert f"weights: {E2B} at {OLD[:12]}, others at {NEW[:12]}" in inf2_row


def test_one_commit_no_warning(tmp_path):
    md, html = _run(tmp_path, {"g5g": _w(OLD, precision="fp16"), "inf2": _w(OLD), "bedrock": BEDROCK})
    assert "Not the same weights" not in md and "Not the same weights" not in html
    assert "Weights not confirmed" not in md
    table = md.split("## Weights served", 1)[1].split("## ", 1)[0]
    assert table.count(OLD[:12]) == 2


def test_same_commit_other_files_are_flagged(tmp_path):
    md, _ = _run(tmp_path, {"g5g": _w(OLD), "inf2": _w(OLD, digest=DIGEST_B)})
    top = md.split("## ", 1)[0]
    assert f"{E2B} at {OLD[:12]} (bf16): different config or tokenizer files" in top
    # another precision of the same commit is a deliberate difference, not a flag
    md, _ = _run(tmp_path / "p", {"g5g": _w(OLD, precision="fp16"), "inf2": _w(OLD, digest=DIGEST_B)})
    assert "Not the same weights" not in md


def test_a_commit_not_known_is_said_not_flagged(tmp_path):
    md, _ = _run(tmp_path, {"inf2": _w(OLD), "g5g": {"model": E2B, "error": "not recorded by this server"}})
    top = md.split("## ", 1)[0]
    assert "Not the same weights" not in top
    assert f"Weights not confirmed: {E2B}: not confirmed the same on g5g (not recorded by this server)" in top


def test_a_run_from_before_weights_were_recorded_says_so(tmp_path):
    run = make_results(tmp_path)
    md, _ = render(run)
    table = md.read_text().split("## Weights served", 1)[1].split("## ", 1)[0]
    assert "not recorded: this run's meta.json is from before the kit recorded the weights served" in table
