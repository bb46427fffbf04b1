"""Results written before schema_version (kit/contracts/results.py: version 0) and today's
render the same report; a file from a newer kit renders with a note; a file of a version that is
not a number is named. The synthetic run (tests/report/synthetic.py) is written both ways."""
from __future__ import annotations

import json

from harness.report import render
from tests.report.synthetic import make_results


def _report(root, **kw) -> str:
    run = make_results(root, **kw)
    md, _ = render(run)
    return md.read_text()


def test_an_old_results_directory_renders_as_a_new_one(tmp_path):
    old = make_results(tmp_path / "old")
    assert "schema_version" not in (old / "meta.json").read_text()
    assert isinstance(json.loads((old / "bench" / "g6" / "summary.json").read_text()), list)
    new = make_results(tmp_path / "new", versioned=True)
    for f in ("meta.json", "scoreboard.json", "bench/g6/summary.json"):
        assert list(json.loads((new / f).read_text()))[0] == "schema_version", f
    assert all(list(json.loads(line))[0] == "schema_version"
               for line in (new / "agent_runs.jsonl").read_text().splitlines())
    md_old, md_new = render(old)[0].read_text(), render(new)[0].read_text()
    assert md_old == md_new
    assert "Skipped while reading" not in md_new and "Latency against throughput" in md_new


def test_old_words_in_meta_still_render(tmp_path):
    """meta.json from before ``protocol``/``service`` (``kind``), and endpoints keyed by name."""
    run = make_results(tmp_path, words="old")
    meta = json.loads((run / "meta.json").read_text())
    meta["endpoints"] = {e.pop("name"): e for e in meta["endpoints"]}
    (run / "meta.json").write_text(json.dumps(meta))
    text = render(run)[0].read_text()
    assert "Skipped while reading" not in text and "| endpoint | g6 | openai · g6.xlarge" in text


def test_a_newer_kits_files_render_with_a_note(tmp_path):
    run = make_results(tmp_path, versioned=True)
    path = run / "bench" / "g6" / "summary.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    data["levels"][0]["a_field_from_the_future"] = {"x": 1}
    path.write_text(json.dumps(data))
    meta = json.loads((run / "meta.json").read_text())
    meta["schema_version"] = "two"
    (run / "meta.json").write_text(json.dumps(meta))
    text = render(run)[0].read_text().replace("\\", "")
    assert "summary.json: written by a newer kit (schema_version 99; this kit reads up to 1)" in text
    assert "meta.json: schema_version 'two' is not a whole number: read as version 2" in text  # META.version
    assert "| g6 | c=1 |" in text  # the levels still render
