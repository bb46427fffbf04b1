"""A missing or broken --cdk-json, and a broken config.json for plan --model: one line naming the
file, exit 2, before any AWS client is made; never the default configuration in its place, and
never more than a bounded read (kit/jsonfile.py, the one reader every command uses)."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from harness.cost import placements as plan
from harness.account import deploy, images, leftovers, preflight
from kit import jsonfile, regions
from kit.jsonfile import JsonFileError


def _no_aws(*a, **k):
    raise AssertionError("an AWS client was made for a file that should have been refused")


# command -> (how to call it with extra argv, its prefix on the error line)
COMMANDS = {
    "deploy": (lambda argv: deploy.main(["G6Stack", "--dry-run", *argv], client=_no_aws, run=_no_aws,
                                        out=io.StringIO()), "harness deploy: "),
    "images list": (lambda argv: images.main(["list", *argv], aws=_no_aws, out=io.StringIO()), "harness images: "),
    "leftovers": (lambda argv: leftovers.main(argv, client=_no_aws, price=_no_aws, account="1", out=io.StringIO()),
                  "harness leftovers: "),
    "preflight": (lambda argv: preflight.main(argv, session=object()), "preflight: "),
}


def _make(kind: str, d: Path) -> tuple[Path, str]:
    """A --cdk-json of one broken kind, and the words the error must carry."""
    p = d / "cdk.json"
    if kind == "missing":
        return d / "nope.json", "no such file"
    if kind == "malformed":
        p.write_text('{"context": {')
        return p, "not JSON"
    if kind == "list":
        p.write_text("[1, 2]")
        return p, "a JSON list, not an object"
    if kind == "context string":
        p.write_text('{"context": "region=us-east-1"}')
        return p, '"context" is a JSON string'
    if kind == "context list":
        p.write_text('{"context": [["region", "us-east-1"]]}')
        return p, '"context" is a JSON list'
    if kind == "dev zero":
        return Path("/dev/zero"), "a device, not a JSON file"
    if kind == "symlink to dev zero":
        p.symlink_to("/dev/zero")
        return p, "a device, not a JSON file"
    if kind == "directory":
        p.mkdir()
        return p, "a directory"
    if kind == "fifo":
        os.mkfifo(p)
        return p, "a named pipe"
    if kind == "dangling symlink":
        p.symlink_to(d / "gone.json")
        return p, "no such file"
    if kind == "not utf-8":
        p.write_bytes(b'{"context": {"region": "\xff"}}')
        return p, "not UTF-8"
    if kind == "nested deep":
        p.write_text('{"context": ' + "[" * 100_000 + "]" * 100_000 + "}")
        return p, "nested deeper than 64"
    if kind == "too large":
        p.write_text('{"context": {"x": "' + "a" * (jsonfile.MAX_BYTES + 10) + '"}}')
        return p, "larger than 4 MiB"
    if kind == "huge integer":
        p.write_text('{"context": {"ttl_hours": ' + "9" * 5000 + "}}")
        return p, "digits"
    raise AssertionError(kind)


KINDS = ["missing", "malformed", "list", "context string", "context list", "dev zero", "symlink to dev zero",
         "directory", "fifo", "dangling symlink", "not utf-8", "nested deep", "too large", "huge integer"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_broken_cdk_json_is_one_line_naming_it_exit_2(command, kind, tmp_path, capsys):
    path, words = _make(kind, tmp_path)
    call, prefix = COMMANDS[command]
    assert call(["--cdk-json", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"{prefix}--cdk-json {path}: ") and words in err, err


def test_deploy_with_a_missing_cdk_json_prints_no_command(tmp_path, capsys):
    """The issue's case: it printed `npx cdk deploy G6Stack -c backends=g6` and exited 0."""
    out = io.StringIO()
    assert deploy.main(["G6Stack", "--cdk-json", str(tmp_path / "nope.json"), "--dry-run"], client=_no_aws,
                       out=out) == 2
    assert out.getvalue() == ""
    assert "nope.json: no such file" in capsys.readouterr().err


def test_a_good_cdk_json_is_still_read(tmp_path):
    p = tmp_path / "cdk.json"
    p.write_text(json.dumps({"app": "python3 app.py", "context": {"region": "eu-west-1", "backends": "g6"}}))
    assert regions.read_context(p, required=True) == {"region": "eu-west-1", "backends": "g6"}
    assert regions.context_with(p, ["backends=inf2"], required=True)["backends"] == "inf2"


def test_no_cdk_json_where_a_command_runs_is_still_the_catalog_defaults(tmp_path, monkeypatch):
    """Only a file the user named must exist: without --cdk-json and without ./cdk.json (run from
    another directory) the commands read the defaults, as before."""
    monkeypatch.chdir(tmp_path)
    assert regions.read_context(tmp_path / "cdk.json") == {}
    assert preflight._context(None, []) is None
    out = io.StringIO()
    assert deploy.main(["G6Stack", "--dry-run"], client=lambda s, r: _images_ok(), out=out) == 0
    assert "npx cdk deploy G6Stack" in out.getvalue()


def _images_ok():
    raise AssertionError("G6Stack with the default image needs no image check")


@pytest.mark.parametrize("kind", ["malformed", "context string", "dev zero"])
def test_a_broken_default_cdk_json_is_named_too(kind, tmp_path):
    """The default file (no --cdk-json) may be absent, but when it exists it is read or refused."""
    path, words = _make(kind, tmp_path)
    with pytest.raises(JsonFileError, match=words):
        regions.read_context(path)
    with pytest.raises(regions.RegionError, match=f"cdk.json {path}: "):
        regions.resolve(cdk_json=path)  # the region comes from it: harness.run, harness.cost say so


# -- plan --model PATH: the same reader, and the shape checked -------------------------------------
def _config(tmp_path: Path, **changes) -> Path:
    from kit.models import TEXT_CONFIGS

    p = tmp_path / "cfg.json"
    p.write_text(json.dumps({**TEXT_CONFIGS["E2B"], **changes}))
    return p


PLAN_FILES = {
    "dev zero": (lambda d: _make("dev zero", d)[0], "a device, not a JSON file"),
    "symlink to dev zero": (lambda d: _make("symlink to dev zero", d)[0], "a device, not a JSON file"),
    "nested 100,000 deep": (lambda d: _make("nested deep", d)[0], "nested deeper than 64"),
    "missing": (lambda d: d / "nope.json", "no such file"),
    "malformed": (lambda d: _make("malformed", d)[0], "not JSON"),
    "a list": (lambda d: _make("list", d)[0], "a JSON list, not an object"),
    "too large": (lambda d: _make("too large", d)[0], "larger than 4 MiB"),
    "negative size": (lambda d: _config(d, hidden_size=-1536), "hidden_size=-1536 is not a whole number from 1"),
    "zero heads": (lambda d: _config(d, num_attention_heads=0), "num_attention_heads=0 is not a whole number"),
    "zero layers": (lambda d: _config(d, num_hidden_layers=0, layer_types=[]), "num_hidden_layers=0"),
    "a billion layers": (lambda d: _config(d, num_hidden_layers=10**9), "num_hidden_layers=1000000000"),
    "size as a string": (lambda d: _config(d, hidden_size="1536"), "hidden_size='1536'"),
    "size as a boolean": (lambda d: _config(d, vocab_size=True), "vocab_size=True"),
    "fractional size": (lambda d: _config(d, intermediate_size=6144.5), "intermediate_size=6144.5"),
    "negative kv heads": (lambda d: _config(d, num_key_value_heads=-1), "num_key_value_heads=-1"),
    "more shared layers than layers": (lambda d: _config(d, num_kv_shared_layers=99), "num_kv_shared_layers=99"),
    "unknown layer type": (lambda d: _config(d, layer_types=["sliding_attention"] * 34 + ["chunked"]),
                           "layer_types must be a list of"),
    "text_config a string": (lambda d: _config(d, text_config="E2B"), "text_config is not an object"),
    "5,000-digit size": (lambda d: _make("huge integer", d)[0], "digits"),
}


@pytest.mark.parametrize("case", list(PLAN_FILES))
def test_plan_on_a_broken_config_json_is_one_line_exit_2(case, tmp_path, capsys):
    make, words = PLAN_FILES[case]
    path = make(tmp_path)
    assert plan.main(["--model", str(path), "--offline"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"plan: {path}: ") and words in err, err


def test_plan_on_a_whole_config_json_still_plans(tmp_path, capsys):
    assert plan.main(["--model", str(_config(tmp_path)), "--offline"]) == 0
    assert "Fits (smallest first per backend):" in capsys.readouterr().out


def test_the_reader_stops_at_its_cap(tmp_path):
    p = tmp_path / "big.json"
    p.write_text("[" + "1," * 600 + "1]")
    with pytest.raises(JsonFileError, match="larger than 1 KiB"):
        jsonfile.read_json(p, cap=1024)
    assert jsonfile.read_json(p, cap=4096) == [1] * 601
