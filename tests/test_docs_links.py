"""The docs point at what exists: every relative link in README.md, docs/**/*.md and the other
tracked Markdown files resolves (the file, and the heading when the link names one), and every
repository path quoted in backticks (`stacks/nag.py`, `harness/report/`) is a tracked file or
folder. Runs in `make check` and `make test`; `make docs-check` runs it alone.

A backticked token with a '/' is one of four kinds (``classify``), and only the first is allowed
to be missing nowhere:

* a path of this repository: its first part is a top-level entry (`kit/catalog.py`, `.ci/run`).
  It must be tracked; a glob (`userdata/engine-*.sh`) must match a tracked path; a placeholder
  (`userdata/engine-<name>.sh`) must sit in a tracked folder.
* a run-time output: a path .gitignore covers (`results/<run-id>/report.html`, `cdk.out/`,
  `.venv/bin/python`): written by a run, so it cannot exist in the clone.
* a path in another repository, written `owner/repo:path`.
* anything else (an upstream file, a model id, an instance path, an AWS name), unless its first
  part is one typo away from a top-level entry (`hanress/run.py`): that is a broken path too.

A heading's anchor is GitHub's: the heading text without its Markdown (code spans keep their
text, links keep their label), lower-cased, every character that is not a letter, digit, space,
hyphen or underscore dropped, spaces turned into hyphens, and "-1", "-2" ... added to repeats
(github/cmark-gfm's extension is not the renderer: GitHub's html-pipeline TableOfContentsFilter,
PUNCTUATION_REGEXP = /[^\\p{Word}\\- ]/u, then tr(' ', '-') and a uniqueness suffix).
"""
from __future__ import annotations

import difflib
import fnmatch
import itertools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^\s*(```|~~~)")
# [label](target) and ![alt](target); the target ends at the first space (an optional title
# follows) or the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def tracked(root: Path = ROOT) -> set[str]:
    """Tracked files and the folders that hold them, as repository-relative POSIX paths."""
    # Untracked files that git does not ignore count too: a doc and the file it names may be
    # written before either is committed.
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, text=True, check=True)
    files = {p for p in out.stdout.split("\0") if p and (root / p).exists()}
    paths = set(files)
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            paths.add("/".join(parts[:i]))
    return paths


def markdown_files(root: Path = ROOT) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.md"],
                         cwd=root, capture_output=True, text=True, check=True)
    return sorted({root / p for p in out.stdout.split("\0") if p and (root / p).exists()})


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks: a fence holds commands, not references."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def slug(heading: str) -> str:
    text = LINK.sub(lambda m: re.match(r"!?\[(.*)\]", m.group(0)).group(1), heading)
    text = CODE_SPAN.sub(lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = re.sub(r"[*_]{1,3}(\S(?:.*?\S)?)[*_]{1,3}", r"\1", text)  # emphasis markers
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    # Explicit HTML anchors (<a id="x"></a>, <a name="x">) count too.
    out |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", path.read_text()))
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    cache: dict[Path, set[str]] = {}
    for n, line in prose_lines(path.read_text()):
        for m in LINK.finditer(CODE_SPAN.sub(lambda c: " " * len(c.group(0)), line)):
            target = m.group(1)
            if EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{n}: ({target})"
            if not dest.exists():
                problems.append(f"{where} {file_part} does not exist")
                continue
            if anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where} {dest.relative_to(root)} has no heading #{anchor}")
    return problems


# A placeholder or an elision in a path: <run-id>, {a,b}, $VAR, [x], ..., the unicode ellipsis.
PLACEHOLDER = re.compile(r"[<>{}\[\]|$%=]|\.\.\.|\u2026")
OTHER_REPO = re.compile(r"^[\w.-]+/[\w.-]+:")  # owner/repo:path


def path_tokens(line: str):
    """Tokens of the line's code spans that may be paths: they contain a '/' and are not URLs,
    absolute, home or option paths (an option's value, `--ignore=tests/x.py`, is kept). A trailing
    ':12' or '#anchor', and punctuation around the token, are dropped (a leading '.' is kept:
    `.ci/run` is a path)."""
    for m in CODE_SPAN.finditer(line):
        for token in m.group(2).split():
            token = token.strip("()\"',;").rstrip(".:")
            option = re.match(r"^--?[\w-]+=(.+)$", token)
            if option:
                token = option.group(1)
            token = re.sub(r"(:\d+(-\d+)?|#.*)$", "", token)
            if "/" in token and not EXTERNAL.match(token) and not token.startswith(("/", "~", "-")):
                yield token


def ignored(tokens: list[str], root: Path = ROOT) -> set[str]:
    """The tokens .gitignore covers (git check-ignore decides, as for any path)."""
    if not tokens:
        return set()
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=root, input="\n".join(tokens),
                         capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr  # 1: none ignored
    return set(out.stdout.splitlines())


def classify(token: str, known: set[str], outputs: set[str]) -> tuple[str, str | None]:
    """(kind, problem or None) for one token: kind is "repo", "output", "other-repo" or "outside"."""
    top = {p for p in known if "/" not in p}
    rel = token.removeprefix("./").rstrip("/")
    first = rel.split("/")[0]
    if OTHER_REPO.match(rel):
        return "other-repo", None
    if first not in top:
        if token in outputs:
            return "output", None
        folders = {p.split("/")[0] for p in known if "/" in p}
        near = difflib.get_close_matches(first, folders, n=1, cutoff=0.8)
        return "outside", (f"looks like `{near[0]}/` but `{first}` is no top-level entry" if near else None)
    if PLACEHOLDER.search(rel):
        parts = rel.split("/")
        literal = "/".join(itertools.takewhile(lambda part: not PLACEHOLDER.search(part) and not
                                               any(c in part for c in "*?"), parts))
        if literal in known:
            return "repo", None
        return "repo", f"the folder `{literal}` is not in the repository"
    if any(c in rel for c in "*?"):
        if any(fnmatch.fnmatchcase(p, rel) for p in known):
            return "repo", None
        return "repo", "matches no file or folder of the repository"
    if rel in known:
        return "repo", None
    if token in outputs:  # e.g. a run-time file under a tracked folder, if .gitignore names it
        return "output", None
    return "repo", "is not a file or folder of the repository"


def path_kinds(path: Path, known: set[str], root: Path = ROOT) -> list[tuple[str, str, str, str | None]]:
    """(where, token, kind, problem) for every path token of one Markdown file."""
    found = [(f"{path.relative_to(root)}:{n}", token) for n, line in prose_lines(path.read_text())
             for token in path_tokens(line)]
    outputs = ignored(sorted({t for _, t in found}), root)
    return [(where, token, *classify(token, known, outputs)) for where, token in found]


def missing_paths(path: Path, known: set[str], root: Path = ROOT) -> list[str]:
    return [f"{where}: `{token}` {problem}" for where, token, _, problem in path_kinds(path, known, root)
            if problem]


def test_relative_links_resolve():
    problems = [p for md in markdown_files() for p in broken_links(md)]
    assert not problems, "\n".join(problems)


def test_backticked_repository_paths_exist():
    known = tracked()
    problems = [p for md in markdown_files() for p in missing_paths(md, known)]
    assert not problems, "\n".join(problems)


def test_the_path_check_checks_the_docs_paths():
    """Not vacuous: most path tokens in the docs are this repository's and are checked, and the
    run-time outputs the docs name (the run's results folder) are told apart, not skipped blindly."""
    known = tracked()
    kinds = [(token, kind) for md in markdown_files() for _, token, kind, _ in path_kinds(md, known)]
    repo = [t for t, k in kinds if k == "repo"]
    assert len(repo) > 200 and len(repo) > len(kinds) / 2, (len(repo), len(kinds))
    assert any(t.startswith("results/") for t, k in kinds if k == "output")


def test_the_check_finds_a_broken_link_a_missing_heading_and_a_missing_path(tmp_path):
    """The oracle: a hand-made repository with one of each fault, and the right ones passing."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "catalog.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\n## Same weights everywhere: the `pinned` commit\n\n## Title\n")
    (tmp_path / "userdata").mkdir()
    (tmp_path / "userdata" / "engine-vllm.sh").write_text("")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "run.py").write_text("")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text("")
    (tmp_path / ".gitignore").write_text("results/\n.venv\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md#same-weights-everywhere-the-pinned-commit) [dup](docs/a.md#title-1)\n"
        "[gone](docs/b.md) [no heading](docs/a.md#nowhere) [web](https://example.com/x)\n"
        "`kit/catalog.py` `kit/catalog.py:12` `kit/` `kit/nope.py` `results/<run-id>/` `google/gemma`\n"
        "`xbill9/sagemaker-gemma:docs/runs/card.md` `./kit/catalog.py` `.ci/run` `.ci/gone`\n"
        "`userdata/engine-*.sh` `userdata/engine-<name>.sh` `userdata/kernel-*.sh` `docs/src/<v>.yml`\n"
        "`.venv/bin/python` `results/x/report.html` `hanress/run.py` `--ignore=kit/gone.py`.\n"
        "```\n[in a fence](docs/none.md) `kit/fenced.py`\n```\n")
    readme = tmp_path / "README.md"
    assert broken_links(readme, tmp_path) == [
        "README.md:2: (docs/b.md) docs/b.md does not exist",
        "README.md:2: (docs/a.md#nowhere) docs/a.md has no heading #nowhere"]
    assert missing_paths(readme, tracked(tmp_path), tmp_path) == [
        "README.md:3: `kit/nope.py` is not a file or folder of the repository",
        "README.md:4: `.ci/gone` is not a file or folder of the repository",
        "README.md:5: `userdata/kernel-*.sh` matches no file or folder of the repository",
        "README.md:5: `docs/src/<v>.yml` the folder `docs/src` is not in the repository",
        "README.md:6: `hanress/run.py` looks like `harness/` but `hanress` is no top-level entry",
        "README.md:6: `kit/gone.py` is not a file or folder of the repository"]
    kinds = {token: kind for _, token, kind, _ in path_kinds(readme, tracked(tmp_path), tmp_path)}
    assert kinds["results/<run-id>/"] == kinds[".venv/bin/python"] == kinds["results/x/report.html"] == "output"
    assert kinds["google/gemma"] == "outside" and kinds["xbill9/sagemaker-gemma:docs/runs/card.md"] == "other-repo"


@pytest.mark.parametrize("heading, want", [
    ("Nothing billable before the images exist", "nothing-billable-before-the-images-exist"),
    ("Precisions side by side (variants)", "precisions-side-by-side-variants"),
    ("`make check`: the fast tier", "make-check-the-fast-tier"),
    ("[Link](x.md) and **bold**", "link-and-bold"),
    ("Costs: $/h, 8 h TTL", "costs-h-8-h-ttl"),
])
def test_slug_is_githubs(heading, want):
    assert slug(heading) == want
