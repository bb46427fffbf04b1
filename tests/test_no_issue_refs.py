"""No reference to this project's own issue tracker in code, tests or docs: a sentence says the
thing itself ("a wait condition's timeout runs from its own creation"), and the ticket it came
from goes in the commit body. Every tracked or new (not ignored) text file is scanned for
"issue N" / "issues N" / "Issue #N", also across a line break.

Upstream references are sources and stay: an issue named with its project (``owner/repo issue
N``, ``github.com/owner/repo issue N``, "vLLM issues #N"). "PR #N", ``owner/repo#N`` and "(#N)"
(an upstream pull request or release subject) never read "issue N", so the pattern leaves them
alone. A folder holding a PROVENANCE.md is upstream source vendored as is
(tests/neuron/vendored_nxdi_0_8/): its issue numbers are upstream's, and it is not scanned.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

ISSUE = re.compile(r"\b[Ii]ssues?\s+#?[0-9]+\b")
# What precedes an upstream reference: an owner/repo name or a project named in prose.
UPSTREAM_BEFORE = re.compile(r"(?:\b(?P<owner>[\w.-]+)/[\w.-]+|\bvLLM)\s*$")


def own_issue_refs(text: str, top_level: set[str] = frozenset()) -> list[tuple[int, str]]:
    """(line number, line) of each reference to this project's own issues in ``text``.

    ``top_level``: the repository's top-level entries; ``harness/run.py issue 5`` names a file of
    this repository, not an upstream project, so it is not let through as ``owner/repo``."""
    lines = text.splitlines()
    found = []
    for m in ISSUE.finditer(text):
        before = text[max(0, m.start() - 80):m.start()].replace("\n", " ")
        up = UPSTREAM_BEFORE.search(before)
        if up and (up.group("owner") is None or up.group("owner") not in top_level):
            continue
        n = text.count("\n", 0, m.start()) + 1
        found.append((n, lines[n - 1].strip()))
    return found


def scanned_files(root: Path = ROOT) -> list[str]:
    """Tracked files and new ones git does not ignore, less this file (its examples below) and
    vendored folders."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, text=True, check=True)
    files = [p for p in out.stdout.split("\0") if p and (root / p).is_file()]
    vendored = tuple(p.removesuffix("PROVENANCE.md") for p in files if p.rsplit("/", 1)[-1] == "PROVENANCE.md")
    return sorted(p for p in files if p != SELF and not p.startswith(vendored))


def test_no_file_names_this_projects_issues():
    top_level = {p.name for p in ROOT.iterdir()}
    bad = []
    for rel in scanned_files():
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:  # not text
            continue
        bad += [f"{rel}:{n}: {line}" for n, line in own_issue_refs(text, top_level)]
    assert not bad, ("this project's issue numbers belong in commit bodies; say the thing itself:\n"
                     + "\n".join(bad))


# Sentences as they stood before they were rewritten, each with the reference the scan must find.
OWN = [
    '"""Issue 11, point 5: whenever CloudFormation replaces an EC2 backend\'s instance',
    "could time out before the instance's own failure signal (the log tail) arrived (issue 24 point 7).",
    "byte every 2 s never trips it and holds the caller forever (issue 21, point 6). Here a timer",
    "`tunnel-inproc` (before issue 15: paramiko in the load generator's threads);",
    "64-stream figures beyond issue 15's limits, the limit is the machine",
    "requests' duration (issue 20's goals: >= 0.85 and <= 10%).",
    "# Cycles that still exist while other parts of issue 10 land; being removed by issue 10 (the",
    '"""Each tunnel path minus direct per concurrency (medians over rounds): the quantities issue\n'
    "    15's targets are stated in.\"\"\"",
    "See Issue #32 for the plan.",
    "issues 11 and 24",
    "kit/config.py issue 5 says",
]

UPSTREAM = [
    "param \"messages.[3].role\": its 400 quoted in github.com/smarter-sh/smarter issue 264 and\n"
    "    miurla/morphic issue 136) and a call not followed by its results",
    "# kit's units and the Image Builder agent get). aws-neuron/aws-neuron-sdk issue #447: \"neuron-ls:",
    "allows 64 KB, and the first request fails with `triton.runtime.errors.OutOfResources` (vLLM\n"
    "issues #38918 and #57712; the proposed fix, PR #39018, is not merged).",
    "# neuron-ls is not on the agent's PATH (aws-neuron/aws-neuron-sdk#447): call it by path.",
    "inf2 is the sibling 31B port (#106) on **SDK 2.28**; commit 6aa6121 of pull request #115",
    "dstack PR #3752 'RTXPRO6000:96GB:1..8'",
    "the issue is that the socket never closes",
]


@pytest.mark.parametrize("text", OWN)
def test_the_scan_finds_this_projects_references(text):
    assert own_issue_refs(text, {"kit", "harness"}), text


@pytest.mark.parametrize("text", UPSTREAM)
def test_the_scan_leaves_upstream_references_alone(text):
    assert own_issue_refs(text, {"kit", "harness"}) == [], text


def test_a_reference_is_reported_on_its_own_line():
    text = "first line\nsecond line (issue 24 point 7)\nthird line\n"
    assert own_issue_refs(text) == [(2, "second line (issue 24 point 7)")]
