"""Damaged checkpoints and bad configs against ``build``, ``check`` and ``sizes``:
one line naming the file and what was expected, exit 2, bounded work, no traceback,
nothing read from outside the directory.

Three tables. DAMAGE spoils one file of a checkpoint (a shard cut short as by a failed download,
a lying header length, a non-JSON header, offsets past the end, an unknown dtype, an index
without ``weight_map`` or naming ``../x.safetensors``, config.json a list, FIFOs and /dev/zero
where files should be...); every row runs against a source for ``build`` and, where the file
exists in a package, against a built package for ``check``. BAD_CONFIGS are config.json files
for ``sizes``, including sizes that would build a huge meta model. Every row runs in-process under
a deadline (tests/package/hostile.run), so one that blocks (a FIFO) or works without bound fails
instead of holding the suite, except a FIFO shard (OWN_PROCESS), which runs as its own process
with a timeout, as does one more row, to show that no traceback reaches the terminal.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import save_file  # noqa: E402

from harness.package.build import build  # noqa: E402
from kit.schemes import SCHEMES  # noqa: E402
from tests.package import tiny  # noqa: E402
from tests.package.hostile import (INDEX, copy, header_of, one_line, raw_shard, run,  # noqa: E402
                                   run_process, weight_map)

SECRET = "outside_secret_tensor"
FIXTURE = str(Path(__file__).parent / "fixtures" / "gemma-4-E2B-it.config.json")


def _shard(d):
    return d / sorted(set(weight_map(d).values()))[0]


def _rehead(edit):
    """Rewrite the first shard's header (parsed JSON) and keep its data."""
    def f(d, outside):
        p = _shard(d)
        header, data = header_of(p)
        raw_shard(p, edit(header), data)
    return f


def _first_tensor(header):
    return next(k for k in header if k != "__metadata__")


def _offsets_past_end(h):
    k = _first_tensor(h)
    h[k]["data_offsets"] = [h[k]["data_offsets"][0], 10**9]
    return h


def _dtype(h, value="Q7"):
    h[_first_tensor(h)]["dtype"] = value
    return h


def _shape(h, value):
    h[_first_tensor(h)]["shape"] = value
    return h


def _same_offsets(h):
    a, b = [k for k in h if k != "__metadata__"][:2]
    h[b]["data_offsets"] = list(h[a]["data_offsets"])
    return h


def _bytes(fn):
    def f(d, outside):
        p = _shard(d)
        p.write_bytes(fn(p.read_bytes()))
    return f


def _header_length(fn):
    def f(d, outside):
        p = _shard(d)
        raw = p.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        p.write_bytes(struct.pack("<Q", fn(n, len(raw))) + raw[8:])
    return f


def _replace_with(kind, name=None):
    """Put a directory, FIFO, /dev/zero link, dangling link or outside link where a file was."""
    def f(d, outside):
        p = _shard(d) if name is None else d / name
        keep = p.read_bytes() if p.is_file() else b"{}"
        p.unlink()
        if kind == "dir":
            p.mkdir()
        elif kind == "fifo":
            os.mkfifo(p)
        elif kind == "zero":
            os.symlink("/dev/zero", p)
        elif kind == "missing":
            pass
        elif kind == "outside":
            (outside / p.name).write_bytes(keep)
            os.symlink(outside / p.name, p)
    return f


def _index(obj):
    def f(d, outside):
        (d / INDEX).write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return f


def _index_entry(rel):
    def f(d, outside):
        save_file({SECRET: torch.ones(2)}, str(outside / "x.safetensors"))
        target = str(outside / "x.safetensors") if rel == "ABS" else rel
        index = json.loads((d / INDEX).read_text())
        index["weight_map"][SECRET] = target
        (d / INDEX).write_text(json.dumps(index))
    return f


def _index_lies(d, outside):
    index = json.loads((d / INDEX).read_text())
    files = sorted(set(index["weight_map"].values()))
    index["weight_map"]["model.language_model.norm.weight.not_there"] = files[0]
    (d / INDEX).write_text(json.dumps(index))


def _config(obj):
    def f(d, outside):
        (d / "config.json").write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return f


def _config_edit(edit):
    def f(d, outside):
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return f


def _no_index(also=None):
    def f(d, outside):
        if also:
            also(d)
        (d / INDEX).unlink()
    return f


def _no_shards(d):
    for p in d.glob("*.safetensors"):
        p.unlink()


def _duplicate_tensor(d):
    first = _shard(d)
    header, _ = header_of(first)
    name = _first_tensor(header)
    save_file({name: torch.zeros(header[name]["shape"], dtype=torch.bfloat16)}, str(d / "zz-extra.safetensors"))


def _truncate_one(d):
    p = _shard(d)
    p.write_bytes(p.read_bytes()[:-64])


def _write(name, data: bytes):
    def f(d, outside):
        (d / name).write_bytes(data)
    return f


def _deep(n):
    return "[" * n + "]" * n


# id: (mutation, words in the line, applies to a package for check)
DAMAGE = {
    "truncated shard": (_bytes(lambda r: r[:-100]), ["not a readable safetensors file", "incomplete metadata"], True),
    "shard cut inside its header": (_bytes(lambda r: r[:20]), ["not a readable safetensors file"], True),
    "empty shard": (_bytes(lambda r: b""), ["header too small"], True),
    "shard of 3 bytes": (_bytes(lambda r: b"abc"), ["header too small"], True),
    "header length past the file": (_header_length(lambda n, size: size + 100), ["not a readable"], True),
    "header length 2**40": (_header_length(lambda n, size: 2**40), ["header too large"], True),
    "header length short by 8": (_header_length(lambda n, size: n - 8), ["not a readable"], True),
    "header length 0": (_header_length(lambda n, size: 0), ["not a readable"], True),
    "non-JSON header": (_rehead(lambda h: b"x" * 64), ["invalid JSON"], True),
    "non-UTF-8 header": (_rehead(lambda h: b"\xff\xfe" * 32), ["invalid UTF-8"], True),
    "header a JSON list": (_rehead(lambda h: [1, 2]), ["not a readable"], True),
    "header entry a number": (_rehead(lambda h: {**h, _first_tensor(h): 5}), ["not a readable"], True),
    "offsets past the end": (_rehead(_offsets_past_end), ["not a readable"], True),
    "two tensors at the same offsets": (_rehead(_same_offsets), ["not a readable"], True),
    "unknown dtype": (_rehead(_dtype), ["unknown variant `Q7`"], True),
    "dtype of another size": (_rehead(lambda h: _dtype(h, "U8")), ["not a readable"], True),
    "shape disagrees with offsets": (_rehead(lambda h: _shape(h, [3, 3])), ["not a readable"], True),
    "negative shape": (_rehead(lambda h: _shape(h, [-1, 64])), ["not a readable"], True),
    "shape of strings": (_rehead(lambda h: _shape(h, ["a"])), ["not a readable"], True),
    "metadata not strings": (_rehead(lambda h: {**h, "__metadata__": {"format": 5}}), ["not a readable"], True),
    "shard is a directory": (_replace_with("dir"), ["not a regular file"], True),
    "shard is a FIFO": (_replace_with("fifo"), ["not a regular file"], True),
    "shard links to /dev/zero": (_replace_with("zero"), ["not a regular file"], True),
    "shard links outside the directory": (_replace_with("outside"), ["outside the checkpoint directory"], True),
    "shard missing": (_replace_with("missing"), ["missing"], True),
    "index not JSON": (_index("{not json"), [INDEX, "not valid JSON"], True),
    "index not UTF-8": (_write(INDEX, b"\xff\xfe{}"), [INDEX, "not UTF-8"], True),
    "index a list": (_index([1, 2]), [INDEX, "weight_map"], True),
    "index without weight_map": (_index({"metadata": {}}), [INDEX, "weight_map"], True),
    "weight_map a list": (_index({"weight_map": [["a", "b"]]}), [INDEX, "weight_map"], True),
    "weight_map empty": (_index({"weight_map": {}}), [INDEX, "empty"], True),
    "weight_map value a number": (_index({"weight_map": {"a": 5}}), ["5", "not a file name"], True),
    "weight_map value with NUL": (_index({"weight_map": {"a": "x\u0000.safetensors"}}), ["not a file name"], True),
    "entry ../x.safetensors": (_index_entry("../outside/x.safetensors"), ["points outside"], True),
    "entry an absolute path": (_index_entry("ABS"), ["points outside"], True),
    "entry sub/../../x": (_index_entry("sub/../../outside/x.safetensors"), ["points outside"], True),
    "index names a tensor its file lacks": (_index_lies, ["does not hold it"], False),
    "index nested 100,000 deep": (_index(_deep(100_000)), [INDEX, "nested deeper"], True),
    "index nested 100 deep": (_index({"weight_map": {"a": json.loads(_deep(100))}}), [INDEX, "nested deeper"], True),
    "index is a FIFO": (_replace_with("fifo", INDEX), [INDEX, "not a regular file"], True),
    "index links to /dev/zero": (_replace_with("zero", INDEX), [INDEX, "not a regular file"], True),
    "index is a directory": (_replace_with("dir", INDEX), [INDEX, "not a regular file"], True),
    "config.json missing": (_replace_with("missing", "config.json"), ["config.json"], True),
    "config.json a list": (_config([1, 2]), ["config.json", "a JSON list; expected an object"], True),
    "config.json a string": (_config('"gemma4"'), ["config.json", "a JSON str"], True),
    "config.json null": (_config("null"), ["config.json", "NoneType"], True),
    "config.json not JSON": (_config("{'model_type': 'gemma4'}"), ["config.json", "not valid JSON"], True),
    "config.json not UTF-8": (_write("config.json", b"\xff{}"), ["config.json", "not UTF-8"], True),
    "config.json nested 10,000 deep": (_config(_deep(10_000)), ["config.json", "nested deeper"], True),
    "config.json is a FIFO": (_replace_with("fifo", "config.json"), ["config.json", "not a regular file"], True),
    "config.json links to /dev/zero": (_replace_with("zero", "config.json"), ["not a regular file"], True),
    "config.json links outside": (_replace_with("outside", "config.json"), ["outside the checkpoint"], True),
    "config.json is a directory": (_replace_with("dir", "config.json"), ["not a regular file"], True),
    "text_config a list": (_config_edit(lambda c: c.update(text_config=[1])), ["text_config is a list"], False),
    "text_config a string": (_config_edit(lambda c: c.update(text_config="x")), ["text_config is a str"], False),
    "model_type llama": (_config_edit(lambda c: c.get("text_config", c).update(model_type="llama")),
                         ["'llama'", "Gemma 4"], True),
    "hidden_size a string": (_config_edit(lambda c: c["text_config"].update(hidden_size="64")), ["hidden_size '64'"], False),
    "num_hidden_layers 10,000,000": (_config_edit(lambda c: c["text_config"].update(num_hidden_layers=10_000_000)),
                                     ["num_hidden_layers 10000000", "512"], False),
    "no index and no shards": (_no_index(_no_shards), ["no model.safetensors.index.json and no *.safetensors"], True),
    "no index, a tensor in two shards": (_no_index(_duplicate_tensor), ["in both"], True),
    "no index, a truncated shard": (_no_index(_truncate_one), ["incomplete metadata"], True),
    "tokenizer_config.json not JSON": (_write("tokenizer_config.json", b"{oops"), ["tokenizer_config.json", "not valid JSON"], False),
    "tokenizer_config.json links to /dev/zero": (_replace_with("zero", "tokenizer_config.json"), ["not a regular file"], False),
    "tokenizer.json is a FIFO": (_replace_with("fifo", "tokenizer.json"), ["tokenizer.json", "not a regular file"],
                                 False),
    "tokenizer.json links outside": (_replace_with("outside", "tokenizer.json"), ["tokenizer.json", "outside"],
                                     False),
    "chat template links to /dev/zero": (_replace_with("zero", "chat_template.jinja"), ["not a regular file"],
                                         False),
}


# Rows whose file an unguarded reader opens in native code: safetensors (Rust) waits on a FIFO
# through SIGALRM (seen: the old build blocked in the kernel's wait_for_partner past the
# deadline), so these run as their own process with a timeout, to fail rather than hang.
OWN_PROCESS = {"shard is a FIFO"}


def _command(argv, capsys, case):
    return run_process(argv, timeout=120) if case in OWN_PROCESS else run(argv, capsys)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good") / "src"
    tiny.make_checkpoint(d)
    return d


@pytest.fixture(scope="module")
def package(good, tmp_path_factory):
    d = tmp_path_factory.mktemp("pkg") / "emb4"
    build(str(good), str(d), SCHEMES["emb4"], log=lambda _: None)
    return d


def _spoil(base, tmp_path, case):
    d = copy(base, tmp_path / "dir")
    outside = tmp_path / "outside"
    outside.mkdir()
    DAMAGE[case][0](d, outside)
    return d


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_build_refuses_a_damaged_checkpoint_in_one_line(good, tmp_path, capsys, case):
    _, words, _ = DAMAGE[case]
    d = _spoil(good, tmp_path, case)
    out = tmp_path / "pkgs" / "emb4"
    rc, stdout, err = _command(["build", "--source", str(d), "--out", str(out)], capsys, case)
    line = one_line(rc, err)
    for w in words:
        assert w in line, line
    assert "[1/" not in stdout and SECRET not in stdout
    assert not (tmp_path / "pkgs").exists()


@pytest.mark.parametrize("case", sorted(c for c, row in DAMAGE.items() if row[2]))
def test_check_refuses_a_damaged_package_in_one_line(package, tmp_path, capsys, case):
    _, words, _ = DAMAGE[case]
    d = _spoil(package, tmp_path, case)
    rc, stdout, err = _command(["check", str(d)], capsys, case)
    line = one_line(rc, err)
    for w in words:
        assert w in line, line
    assert SECRET not in stdout


# -- a package's manifest, which only check reads ------------------------------------------------

MANIFEST_DAMAGE = {  # mutation, exit code, words (exit 2: stderr's one line; exit 1: check's problem list)
    "manifest not JSON": (_write("manifest.json", b"{"), 2, ["manifest.json", "not valid JSON"]),
    "manifest a list": (_write("manifest.json", b"[]"), 2, ["manifest.json", "\"files\""]),
    "manifest files a list": (_write("manifest.json", b'{"files": []}'), 2, ["\"files\""]),
    "manifest entry a string": (_write("manifest.json", b'{"files": {"config.json": "x"}}'), 2, ["\"files\""]),
    "manifest is a FIFO": (_replace_with("fifo", "manifest.json"), 2, ["not a regular file"]),
    "manifest links to /dev/zero": (_replace_with("zero", "manifest.json"), 2, ["not a regular file"]),
    "manifest names ../../x": (_write("manifest.json", json.dumps({"files": {"../../etc/passwd": {"sha256": "0"}}}).encode()),
                               1, ["'../../etc/passwd' is not a file name in the package"]),
    "manifest names a FIFO": (lambda d, o: (os.mkfifo(d / "fifo"), _write("manifest.json", json.dumps(
        {"files": {"fifo": {"sha256": "0"}}}).encode())(d, o)), 1, ["fifo", "not a regular file"]),
    "quantization_config a list": (_config_edit(lambda c: c.update(quantization_config=[1])), 2, ["quantization_config"]),
    "config_groups a list": (_config_edit(lambda c: c["quantization_config"].update(config_groups=[1])), 2,
                             ["config_groups"]),
    "targets a number": (_config_edit(lambda c: c["quantization_config"]["config_groups"]["group_0"].update(targets=5)),
                         2, ["config_groups"]),
    "ignore a string": (_config_edit(lambda c: c["quantization_config"].update(ignore="lm_head")), 2, ["ignore"]),
    "no quantization_config": (_config_edit(lambda c: c.pop("quantization_config")), 2, ["no quantization_config"]),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_DAMAGE))
def test_check_on_a_damaged_manifest_or_quantization_config(package, tmp_path, capsys, case):
    mutate, code, words = MANIFEST_DAMAGE[case]
    d = copy(package, tmp_path / "pkg")
    mutate(d, tmp_path)
    rc, stdout, err = run(["check", str(d)], capsys)
    if code == 2:
        line = one_line(rc, err)
    else:
        assert rc == 1 and "Traceback" not in err, err
        line = stdout
    for w in words:
        assert w in line, line


# -- sizes on bad configs ------------------------------------------------------------------------

def _e2b(**text):
    cfg = json.loads(Path(FIXTURE).read_text())
    cfg["text_config"].update(text)
    return cfg


def _e2b_without(key):
    cfg = _e2b()
    del cfg["text_config"][key]
    return cfg


def _rope(**entries):
    cfg = _e2b()
    cfg["text_config"]["rope_parameters"] = entries
    return cfg


SLIDING = {"rope_type": "default", "rope_theta": 10000.0}
FULL = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}

BAD_CONFIGS = {  # config (JSON value, or bytes as written), words in the line
    "a JSON list": ([1, 2], ["a JSON list"]),
    "a JSON number": (5, ["a JSON int"]),
    "a JSON string": ("gemma4", ["a JSON str"]),
    "null": (None, ["NoneType"]),
    "empty file": (b"", ["not valid JSON"]),
    "not JSON": (b"{model_type: gemma4}", ["not valid JSON"]),
    "not UTF-8": (b"\xff\xfe\x00{", ["not UTF-8"]),
    "nested 100,000 deep": (_deep(100_000).encode(), ["nested deeper"]),
    "nested 70 deep": ({"text_config": json.loads(_deep(70))}, ["nested deeper"]),
    "text_config a list": ({"text_config": [1]}, ["text_config is a list"]),
    "text_config a string": ({"text_config": "x"}, ["text_config is a str"]),
    "text_config null": ({"text_config": None}, ["text_config is a NoneType"]),
    "model_type llama": (_e2b(model_type="llama"), ["model_type 'llama'"]),
    "model_type a number": (_e2b(model_type=4), ["model_type 4"]),
    "no hidden_size": (_e2b_without("hidden_size"), ["no hidden_size"]),
    "no num_hidden_layers": (_e2b_without("num_hidden_layers"), ["no num_hidden_layers"]),
    "no vocab_size": (_e2b_without("vocab_size"), ["no vocab_size"]),
    "hidden_size a string": (_e2b(hidden_size="1536"), ["hidden_size '1536'", "whole number"]),
    "hidden_size a float": (_e2b(hidden_size=1536.5), ["hidden_size 1536.5"]),
    "hidden_size 1536.0": (_e2b(hidden_size=1536.0), ["hidden_size 1536.0"]),
    "hidden_size true": (_e2b(hidden_size=True), ["hidden_size True"]),
    "hidden_size 0": (_e2b(hidden_size=0), ["hidden_size 0"]),
    "hidden_size negative": (_e2b(hidden_size=-64), ["hidden_size -64"]),
    "hidden_size 2**62": (_e2b(hidden_size=2**62), ["hidden_size 4611686018427387904"]),
    "hidden_size not a multiple of 32": (_e2b(hidden_size=1530), ["hidden_size 1530", "multiple of 32"]),
    "head_dim 33": (_e2b(head_dim=33), ["head_dim 33"]),
    "intermediate_size 10**12": (_e2b(intermediate_size=10**12), ["intermediate_size"]),
    "num_hidden_layers 10,000,000": (_e2b(num_hidden_layers=10_000_000), ["num_hidden_layers 10000000", "512"]),
    "num_hidden_layers 0": (_e2b(num_hidden_layers=0, layer_types=[]), ["num_hidden_layers 0"]),
    "num_hidden_layers a list": (_e2b(num_hidden_layers=[35]), ["num_hidden_layers [35]"]),
    "vocab_size 0": (_e2b(vocab_size=0), ["vocab_size 0"]),
    "vocab_size 10**9": (_e2b(vocab_size=10**9), ["vocab_size 1000000000"]),
    "vocab_size_per_layer_input a string": (_e2b(vocab_size_per_layer_input="262144"), ["vocab_size_per_layer_input"]),
    "hidden_size_per_layer_input negative": (_e2b(hidden_size_per_layer_input=-1), ["hidden_size_per_layer_input -1"]),
    "num_attention_heads 0": (_e2b(num_attention_heads=0), ["num_attention_heads 0"]),
    "num_key_value_heads 3 of 8": (_e2b(num_key_value_heads=3), ["num_key_value_heads 3", "divisor"]),
    "num_key_value_heads above heads": (_e2b(num_key_value_heads=16), ["num_key_value_heads 16"]),
    "num_kv_shared_layers 99": (_e2b(num_kv_shared_layers=99), ["num_kv_shared_layers 99"]),
    "num_kv_shared_layers = layers": (_e2b(num_kv_shared_layers=35), ["num_kv_shared_layers 35"]),
    "num_kv_shared_layers negative": (_e2b(num_kv_shared_layers=-1), ["num_kv_shared_layers -1"]),
    "layer_types a string": (_e2b(layer_types="full_attention"), ["layer_types is a str"]),
    "layer_types too short": (_e2b(layer_types=["full_attention"]), ["layer_types is 1 entries", "35"]),
    "layer_types unknown value": (_e2b(layer_types=["chunked_attention"] * 35), ["'chunked_attention'"]),
    "layer_types of numbers": (_e2b(layer_types=[1] * 35), ["layer_types has 1"]),
    "layer_types missing": (_e2b_without("layer_types"), ["no layer_types"]),
    "max_position_embeddings negative": (_e2b(max_position_embeddings=-1), ["max_position_embeddings -1"]),
    "max_position_embeddings missing": (_e2b_without("max_position_embeddings"), ["no max_position_embeddings"]),
    "max_position_embeddings 2**40": (_e2b(max_position_embeddings=2**40), ["max_position_embeddings"]),
    "global_head_dim missing": (_e2b_without("global_head_dim"), ["no global_head_dim"]),
    "global_head_dim a string": (_e2b(global_head_dim="512"), ["global_head_dim '512'"]),
    "rope_parameters missing": (_e2b_without("rope_parameters"), ["no rope_parameters"]),
    "rope_parameters a list": (_e2b(rope_parameters=[1]), ["rope_parameters is a list"]),
    "rope_parameters without full_attention": (_rope(sliding_attention=SLIDING), ["'full_attention'"]),
    "rope entry a string": (_rope(sliding_attention=SLIDING, full_attention="x"), ["'full_attention'"]),
    "partial_rotary_factor a string": (_rope(sliding_attention=SLIDING, full_attention={**FULL, "partial_rotary_factor": "x"}),
                                       ["partial_rotary_factor 'x'"]),
    "partial_rotary_factor 2": (_rope(sliding_attention=SLIDING, full_attention={**FULL, "partial_rotary_factor": 2}),
                                ["partial_rotary_factor 2"]),
    "rope value a list": (_rope(sliding_attention={**SLIDING, "rope_theta": [1]}, full_attention=FULL), ["rope_theta"]),
    "rope_type a number": (_rope(sliding_attention={**SLIDING, "rope_type": 3}, full_attention=FULL), ["rope_type 3"]),
    "use_double_wide_mlp a string": (_e2b(use_double_wide_mlp="yes"), ["use_double_wide_mlp 'yes'"]),
    "tie_word_embeddings a string": (_e2b(tie_word_embeddings="false"), ["tie_word_embeddings 'false'"]),
    "enable_moe_block true": (_e2b(enable_moe_block=True), ["mixture-of-experts"]),
    "a field transformers types strictly": (_e2b(sliding_window="512"), ["sliding_window '512'"]),
    "rms_norm_eps a string": (_e2b(rms_norm_eps="x"), ["Gemma4TextConfig refuses it", "rms_norm_eps"]),
    "hidden_activation a number": (_e2b(hidden_activation=5), ["Gemma4TextConfig refuses it"]),
}


def _write_config(path, value):
    path.write_bytes(value if isinstance(value, bytes) else json.dumps(value).encode())


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_sizes_refuses_a_bad_config_in_one_line(tmp_path, capsys, case):
    value, words = BAD_CONFIGS[case]
    path = tmp_path / "config.json"
    _write_config(path, value)
    rc, stdout, err = run(["sizes", str(path)], capsys)
    line = one_line(rc, err)
    for w in words:
        assert w in line, line
    assert stdout == ""


@pytest.mark.parametrize("kind", ["missing", "directory", "FIFO", "/dev/zero", "/dev/null"])
def test_sizes_refuses_a_config_path_that_is_no_file(tmp_path, capsys, kind):
    path = tmp_path / "config.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind in ("/dev/zero", "/dev/null"):
        path = kind
    rc, stdout, err = run(["sizes", str(path)], capsys)
    line = one_line(rc, err)
    assert str(path) in line


@pytest.mark.parametrize("case", ["num_hidden_layers 10,000,000", "hidden_size 2**62", "vocab_size 10**9",
                                  "intermediate_size 10**12", "max_position_embeddings 2**40"])
def test_sizes_refuses_huge_configs_before_building_anything(tmp_path, capsys, monkeypatch, case):
    """Bounded work: the range check comes before transformers sees the config."""
    import transformers

    def built(*a, **k):
        raise AssertionError("a model config was built from a config out of range")

    monkeypatch.setattr(transformers, "Gemma4TextConfig", built)
    path = tmp_path / "config.json"
    _write_config(path, BAD_CONFIGS[case][0])
    rc, _, err = run(["sizes", str(path)], capsys)
    one_line(rc, err)


def test_a_damaged_shard_as_its_own_process_prints_one_line(good, tmp_path):
    d = _spoil(good, tmp_path, "truncated shard")
    rc, stdout, err = run_process(["build", "--source", str(d), "--out", str(tmp_path / "o")], timeout=120)
    assert "incomplete metadata" in one_line(rc, err)
    assert not (tmp_path / "o").exists()


def test_sizes_still_reads_the_published_config(capsys):
    rc, stdout, err = run(["sizes", FIXTURE], capsys)
    assert rc == 0 and err == ""
    assert stdout.startswith("emb4   2.636 GiB")


def test_a_hugging_face_snapshot_of_links_into_blobs_is_read(good, tmp_path, capsys):
    """huggingface_hub lays a snapshot out as links into the repository's blobs/ (2.4.0
    file_download._create_symlink); those are inside the source, links elsewhere are not."""
    repo = tmp_path / "models--google--x"
    snap = repo / "snapshots" / ("a" * 40)
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for p in sorted(good.iterdir()):
        blob = repo / "blobs" / f"blob-{p.name}"
        blob.write_bytes(p.read_bytes())
        os.symlink(os.path.relpath(blob, snap), snap / p.name)
    rc, stdout, err = run(["build", "--source", str(snap), "--out", str(tmp_path / "pkg")], capsys)
    assert rc == 0, err
    assert "revision " + "a" * 40 in stdout
