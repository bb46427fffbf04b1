"""The context-key table of docs/stacks.md is the keys table of kit/config.py, rendered
(kit/config_doc.py): every key parse accepts is documented, with the default and meaning its row
holds, and the unknown-key hint reads the same rows. These tests fail when the file disagrees,
and say the command that fixes it."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kit import config, config_doc
from kit.catalog import BACKENDS
from kit.config import KEYS, KNOWN_KEYS, ConfigError, parse

ROOT = Path(__file__).resolve().parents[2]


def docs_table(root: Path = ROOT) -> str:
    text = (root / config_doc.PATH).read_text(encoding="utf-8")
    return text.split(config_doc.BEGIN + "\n", 1)[1].split(config_doc.END, 1)[0]


def test_the_stacks_doc_agrees_with_the_keys_table():
    assert config_doc.stale() == []


def test_every_key_parse_accepts_is_documented_and_no_other():
    assert config_doc.documented_keys(docs_table()) == KNOWN_KEYS


def test_the_keys_documented_before_the_table_was_generated_stay_documented():
    """The hand-written table named these (bedrock_model, g6_image and sagemaker_instance_types as
    such); keys that existed but were missing from it (<id>_ami, <id>_variants, neuron_sdk, ...)
    are in it now."""
    documented = config_doc.documented_keys(docs_table())
    assert {"backends", "region", "model", "bedrock_model", "g6_image", "sagemaker_instance_types", "azs",
            "image_az", "idle_stop_minutes", "ttl_hours", "max_model_len", "hf_token_secret", "sagemaker_vllm_tag",
            "sagemaker_ami_version", "model_revision", "tags", "image_kms_key", "neuron_sdk", "neuron_parent_image",
            "sagemaker_ready_minutes", "g6_ami", "g6_variants", "g6_az", "g5g_region", "g5g_instance_type",
            "inf2_model_revision"} <= documented
    assert "| `g6_image` | `dlami` |" in docs_table()


def test_each_row_is_one_table_line_with_its_default_and_meaning():
    lines = docs_table().splitlines()
    assert lines[:2] == ["| key | default | meaning |", "| --- | --- | --- |"]
    assert len(lines) == 2 + len(KEYS)
    for row, line in zip(KEYS, lines[2:]):
        cells = line.removeprefix("| ").removesuffix(" |").split(" | ")
        assert len(cells) == 3 and all(cells), line
        assert cells[0] == config_doc.key_cell(row)
    by_key = {line.split(" | ")[0]: line for line in lines[2:]}
    assert by_key["| `ttl_hours`"].split(" | ")[1] == "8"
    assert by_key["| `region`"].split(" | ")[1] == "`us-east-1`"
    assert by_key["| `<id>_az` (g6, g5g, inf2, trn1)"]  # the catalog's EC2 rows, in catalog order


def test_a_family_lists_the_catalog_rows_that_have_the_key():
    rows = {row.name: row for row in KEYS}
    assert [b.id for b in rows["<id>_az"].rows()] == [b.id for b in BACKENDS.values() if b.service == "ec2"]
    assert config_doc.key_cell(rows["<id>_model"]) == "`<id>_model` (every id)"
    assert config_doc.key_cell(rows["<id>_image"]) == "`g6_image`"  # one row has image choices


def test_defaults_are_the_rows_defaults():
    empty = parse({})
    for name in ("region", "hf_token_secret", "idle_stop_minutes", "ttl_hours", "max_model_len",
                 "sagemaker_vllm_tag", "sagemaker_ami_version", "neuron_sdk", "sagemaker_ready_minutes"):
        assert getattr(empty, name) == config.DEFAULTS[name], name
    assert empty.backend_ids == tuple(BACKENDS) and empty.tags == {} and empty.azs == ()
    assert {b.id: b.instance_type for b in empty.backends} == {b.id: b.instance_type for b in BACKENDS.values()}


@pytest.mark.parametrize("key", sorted(KNOWN_KEYS))
def test_the_unknown_key_hint_reads_the_table(key):
    """A key one letter off is refused with the row's key as the nearest (the table is the only list)."""
    typo = key + "s" if not key.endswith("s") else key[:-1]
    if typo in KNOWN_KEYS:  # <id>_instance_type(s): each is the other's typo, and both are keys
        typo = key + "x"
    with pytest.raises(ConfigError) as e:
        parse({typo: "x"})
    assert str(e.value) == f"unknown context key {typo!r}; did you mean {key!r}?"


def test_a_new_row_is_accepted_documented_and_hinted(monkeypatch, tmp_path):
    """Adding a key is one row: parse reads it, check_keys knows it, --check names the file until --write."""
    row = config.Key("widget_count", config._whole(1, 3), "how many widgets", default=2)
    keys = (*KEYS, row)
    monkeypatch.setattr(config, "KEYS", keys)
    monkeypatch.setattr(config_doc, "KEYS", keys)
    assert config.read_keys({"widget_count": "3"})["widget_count"] == 3
    with pytest.raises(ConfigError, match=r"^widget_count=9 is out of range; valid: 1 to 3$"):
        config.read_keys({"widget_count": 9})
    with pytest.raises(ConfigError, match=r"^unknown context key 'widget_cont'; did you mean 'widget_count'\?$"):
        parse({"widget_cont": 1})
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / config_doc.PATH, tmp_path / config_doc.PATH)
    assert config_doc.stale(tmp_path) == [
        "docs/stacks.md: the context-key table disagrees with kit/config.py KEYS; run python -m kit.config_doc --write"]
    assert config_doc.write(tmp_path) == ["docs/stacks.md"]
    assert "| `widget_count` | 2 | how many widgets |" in docs_table(tmp_path)
    assert config_doc.documented_keys(docs_table(tmp_path)) == KNOWN_KEYS | {"widget_count"}


def test_a_family_row_follows_the_catalog(monkeypatch):
    """A family's keys are its catalog rows': a row that gains image choices gains <id>_image."""
    rows = {row.name: row for row in KEYS}
    g5g = replace(BACKENDS["g5g"], image_choices=(("dlami", "install at boot"),))
    monkeypatch.setitem(config.BACKENDS, "g5g", g5g)
    assert rows["<id>_image"].keys() == ("g6_image", "g5g_image")
    assert config_doc.key_cell(rows["<id>_image"]) == "`<id>_image` (g6, g5g)"
    assert config_doc.default_cell(rows["<id>_image"]) == "`dlami`"


@pytest.fixture()
def copy_root(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / config_doc.PATH, tmp_path / config_doc.PATH)
    return tmp_path


def test_cli_check_and_write(copy_root, capsys):
    assert config_doc.main(["--check", "--root", str(copy_root)]) == 0
    doc = copy_root / config_doc.PATH
    before = doc.read_text()
    doc.write_text(before.replace("| `ttl_hours` | 8 |", "| `ttl_hours` | 12 |"))
    assert config_doc.main(["--check", "--root", str(copy_root)]) == 1
    err = capsys.readouterr().err
    assert err == ("docs/stacks.md: the context-key table disagrees with kit/config.py KEYS; "
                   "run python -m kit.config_doc --write\n")
    assert config_doc.main(["--write", "--root", str(copy_root)]) == 0
    assert capsys.readouterr().out == "rewrote docs/stacks.md\n"
    assert doc.read_text() == before  # nothing outside the markers moved
    assert config_doc.main(["--check", "--root", str(copy_root)]) == 0


def test_a_file_without_its_markers_is_one_line(copy_root, capsys):
    doc = copy_root / config_doc.PATH
    doc.write_text(doc.read_text().replace(config_doc.END, ""))
    assert config_doc.main(["--check", "--root", str(copy_root)]) == 2
    assert capsys.readouterr().err == (
        "kit.config_doc: docs/stacks.md: no '<!-- generated: context-keys (python -m kit.config_doc --write) -->' "
        "... '<!-- end generated: context-keys -->' markers; add them where the context-key table goes\n")


def test_a_bad_option_is_one_line(capsys):
    assert config_doc.main(["--nope"]) == 2  # kit/cli.py's door: the process exits 2 too
    err = capsys.readouterr().err
    assert err.startswith("kit.config_doc: ") and err.count("\n") == 1
