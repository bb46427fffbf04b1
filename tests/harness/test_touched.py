"""harness/account/touched.py: the record of regions the kit touched outside its configuration."""
from __future__ import annotations

import io
import json

import pytest

from harness.account import touched


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state" / "touched.json"


def test_records_once_in_first_recorded_order(state):
    assert touched.recorded_regions() == []  # no file yet: empty, no line
    touched.record_region("us-west-2", "copy of ami-1 for inf2")
    touched.record_region("eu-west-1", "copy of ami-2")
    touched.record_region("us-west-2", "again")
    assert touched.recorded_regions() == ["us-west-2", "eu-west-1"]
    entries = json.loads(state.read_text())["regions"]
    assert [(e["region"], e["why"]) for e in entries] == [("us-west-2", "copy of ami-1 for inf2"),
                                                          ("eu-west-1", "copy of ami-2")]


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"regions": [{"r": 1}]}', b"\xff\xfe",
                                     b'{"regions": "us-west-2"}'])
def test_corrupt_record_is_one_line_and_kept_aside(state, content):
    state.parent.mkdir(parents=True)
    state.write_bytes(content)
    err = io.StringIO()
    assert touched.recorded_regions(err=err) == []
    assert len(err.getvalue().splitlines()) == 1 and str(state) in err.getvalue()
    err = io.StringIO()
    touched.record_region("us-west-2", "copy", err=err)
    assert touched.recorded_regions() == ["us-west-2"]
    assert (state.parent / "touched.json.corrupt").read_bytes() == content  # not destroyed
    assert "moved the unreadable record" in err.getvalue()


def test_unwritable_state_names_the_region(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KIT_STATE_DIR", str(blocker / "state"))  # a folder under a file: cannot exist
    err = io.StringIO()
    touched.record_region("ap-south-1", "copy of ami-3", err=err)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "ap-south-1" in lines[0] and "harness leftovers --region ap-south-1" in lines[0]


def test_default_location_follows_xdg_state_home(tmp_path):
    assert touched.state_file({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "aws-inference-kit" / "touched.json"
    assert touched.state_file({"HOME": "/x"}).parts[-4:] == (".local", "state", "aws-inference-kit", "touched.json")
    assert touched.state_file({"KIT_STATE_DIR": "/s", "XDG_STATE_HOME": "/x"}) == touched.Path("/s/touched.json")


def test_share_tags_carry_the_kit_tag_and_the_source():
    assert touched.share_tags("ami-0abc", "us-east-1") == [
        {"Key": "project", "Value": "aws-inference-kit"}, {"Key": "kit-share", "Value": "ami-0abc us-east-1"}]
