"""A source whose tensors do not match its config.json, or hold NaN/inf, is refused before any
tensor is converted; ``package check`` refuses the packages the unchecked build made of them.

One table of source defects, run twice: ``build`` must stop with one line naming the tensor and
what config.json implies, before the first ``[1/N]`` conversion line, leaving nothing at DEST;
and for every defect the converter itself would have packed (``OLD_BUILD_PACKS``: the build as it
was, the source check switched off), ``check`` on that package exits 1 naming the tensor. A
second table damages built packages the ways a package can be inconsistent on its own (a packed
triple that disagrees, a lying ``weight_shape``). Expected names and shapes come from transformers'
Gemma 4 model, the same as ``sizes`` (tests/package/tiny.py: 4 layers, layers 2 and 3 share
layer 0 and 1's keys and values, hidden 64, heads 2 x 32 sliding / 64 full, intermediate 128).
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from harness.package.build import build  # noqa: E402
from kit.schemes import SCHEMES  # noqa: E402
from tests.package import tiny  # noqa: E402
from tests.package.hostile import copy, edit_config, one_line, read_all, rewrite, run  # noqa: E402

P = "model.language_model."
L = P + "layers."


def _drop(*names):
    def f(d, t):
        for n in names:
            del t[n]
    return f


def _reshape(name, shape):
    def f(d, t):
        t[name] = torch.full(shape, 0.5, dtype=torch.bfloat16)
    return f


def _poke(name, value, index=0):
    def f(d, t):
        w = t[name].clone()
        w.view(-1)[index] = value
        t[name] = w
    return f


def _add(name, shape):
    def f(d, t):
        t[name] = torch.full(shape, 0.5, dtype=torch.bfloat16)
    return f


def _extra_layer(d, t):
    for n in [n for n in t if n.startswith(L + "3.")]:
        t[n.replace(L + "3.", L + "4.")] = t[n].clone()


def _drop_layer(d, t):
    for n in [n for n in t if n.startswith(L + "3.")]:
        del t[n]


def _untie(d, t):
    def edit(cfg):
        cfg["tie_word_embeddings"] = False
        cfg["text_config"]["tie_word_embeddings"] = False
    edit_config(d, edit)


def _config(**fields):
    def f(d, t):
        edit_config(d, lambda cfg: cfg["text_config"].update(fields))
    return f


def _dtype(name, dtype):
    def f(d, t):
        t[name] = t[name].to(dtype)
    return f


def _both(*fs):
    def f(d, t):
        for g in fs:
            g(d, t)
    return f


# id: (mutation, words the one line must hold)
SOURCE_DEFECTS = {
    "missing q_proj": (_drop(L + "1.self_attn.q_proj.weight"), [L + "1.self_attn.q_proj.weight", "missing", "[128, 64]"]),
    "missing k_proj (own-KV layer)": (_drop(L + "0.self_attn.k_proj.weight"), [L + "0.self_attn.k_proj.weight", "missing"]),
    "missing o_proj": (_drop(L + "2.self_attn.o_proj.weight"), [L + "2.self_attn.o_proj.weight", "missing"]),
    "missing down_proj": (_drop(L + "3.mlp.down_proj.weight"), [L + "3.mlp.down_proj.weight", "missing"]),
    "missing input_layernorm": (_drop(L + "2.input_layernorm.weight"), [L + "2.input_layernorm.weight", "missing", "[64]"]),
    "missing q_norm": (_drop(L + "0.self_attn.q_norm.weight"), [L + "0.self_attn.q_norm.weight", "missing", "[32]"]),
    "missing final norm": (_drop(P + "norm.weight"), [P + "norm.weight", "missing"]),
    "missing layer_scalar": (_drop(L + "1.layer_scalar"), [L + "1.layer_scalar", "missing", "[1]"]),
    "missing per-layer table": (_drop(P + "embed_tokens_per_layer.weight"), [P + "embed_tokens_per_layer.weight", "missing"]),
    "missing per-layer projection norm": (_drop(P + "per_layer_projection_norm.weight"),
                                          [P + "per_layer_projection_norm.weight", "missing"]),
    "missing a whole layer": (_drop_layer, [L + "3.", "missing"]),
    "Linear transposed": (_reshape(L + "0.mlp.down_proj.weight", (128, 64)),
                          [L + "0.mlp.down_proj.weight", "shape [128, 64]", "implies [64, 128]"]),
    "Linear with extra rows": (_reshape(L + "1.mlp.gate_proj.weight", (160, 64)),
                               [L + "1.mlp.gate_proj.weight", "shape [160, 64]", "implies [128, 64]"]),
    "double-wide MLP not double": (_reshape(L + "2.mlp.up_proj.weight", (128, 64)),
                                   [L + "2.mlp.up_proj.weight", "implies [256, 64]"]),
    "full-attention q_proj at sliding width": (_reshape(L + "1.self_attn.q_proj.weight", (64, 64)),
                                               [L + "1.self_attn.q_proj.weight", "implies [128, 64]"]),
    "norm of the wrong width": (_reshape(L + "0.self_attn.q_norm.weight", (64,)),
                                [L + "0.self_attn.q_norm.weight", "shape [64]", "implies [32]"]),
    "1-D Linear": (_reshape(L + "0.self_attn.o_proj.weight", (4096,)),
                   [L + "0.self_attn.o_proj.weight", "shape [4096]", "implies [64, 64]"]),
    "2-D norm": (_reshape(P + "norm.weight", (1, 64)), [P + "norm.weight", "shape [1, 64]", "implies [64]"]),
    "embedding table of the wrong vocabulary": (_reshape(P + "embed_tokens.weight", (96, 64)),
                                                [P + "embed_tokens.weight", "implies [128, 64]"]),
    "layer the config lacks": (_extra_layer, [L + "4.", "layer 4", "num_hidden_layers 4"]),
    "k_proj in a KV-shared layer": (_add(L + "3.self_attn.k_proj.weight", (64, 64)),
                                    [L + "3.self_attn.k_proj.weight", "not a tensor of the Gemma 4 text model"]),
    "a bias Gemma 4 has not": (_add(L + "0.self_attn.q_proj.bias", (64,)), [L + "0.self_attn.q_proj.bias", "not a tensor"]),
    "stray top-level tensor": (_add(P + "rotary_emb.inv_freq", (16,)), [P + "rotary_emb.inv_freq", "not a tensor"]),
    "NaN in a norm": (_poke(L + "1.post_attention_layernorm.weight", float("nan"), 5),
                      [L + "1.post_attention_layernorm.weight", "non-finite", "nan at index [5]"]),
    "inf in a norm": (_poke(P + "norm.weight", float("inf"), 63), [P + "norm.weight", "inf at index [63]"]),
    "-inf in layer_scalar": (_poke(L + "2.layer_scalar", float("-inf")), [L + "2.layer_scalar", "-inf"]),
    "NaN in a Linear": (_poke(L + "0.mlp.gate_proj.weight", float("nan"), 64 * 3 + 7),
                        [L + "0.mlp.gate_proj.weight", "nan at row 3, column 7"]),
    "inf in the per-layer table's last row": (_poke(P + "embed_tokens_per_layer.weight", float("inf"), 128 * 128 - 1),
                                              [P + "embed_tokens_per_layer.weight", "row 127, column 127"]),
    "untied config, no lm_head": (_untie, ["lm_head.weight", "missing", "tie_word_embeddings false"]),
    "lm_head of the wrong shape": (_add("lm_head.weight", (64, 64)), ["lm_head.weight", "shape [64, 64]", "[128, 64]"]),
    "integer norm": (_dtype(L + "0.input_layernorm.weight", torch.int32), [L + "0.input_layernorm.weight", "dtype I32"]),
    "float32 Linear for an int4 scheme": (_dtype(L + "0.mlp.up_proj.weight", torch.float32),
                                          [L + "0.mlp.up_proj.weight", "dtype F32", "BF16 values only"]),
    "config: hidden_size disagrees": (_config(hidden_size=128), ["embed_tokens.weight", "implies [128, 128]"]),
    "config: layer 0 says full attention": (_config(layer_types=["full_attention"] * 4),
                                            [L + "0.self_attn.q_proj.weight", "implies [128, 64]"]),
    "config: fewer layers": (_config(num_hidden_layers=3, layer_types=["sliding_attention", "full_attention"] * 1
                                     + ["full_attention"], num_kv_shared_layers=1),
                             ["layers.", "implies"]),
    "config: no KV sharing": (_config(num_kv_shared_layers=0), [L + "2.self_attn.k_norm.weight", "missing"]),
    "MoE experts tensor": (_add(L + "0.experts.gate_up_proj", (2, 64, 64)), ["mixture-of-experts"]),
    "two defects at once": (_both(_drop(L + "1.self_attn.q_proj.weight"), _reshape(P + "norm.weight", (32,))),
                            [L + "1.self_attn.q_proj.weight", "1 more problem"]),
}

# Defects the converter packs when the source check is off (the build as it was before it):
# ``check`` must refuse the package it makes. The others stop the converter itself (an off-grid
# int4 group, an untied source with no head to copy, ...). One defect leaves no trace in the
# package: an untied source without lm_head is converted as if tied (its config.json is
# rewritten), so only the build can refuse it.
OLD_BUILD_PACKS = {
    "missing q_proj", "missing k_proj (own-KV layer)", "missing o_proj", "missing down_proj",
    "missing input_layernorm", "missing q_norm", "missing final norm", "missing layer_scalar",
    "missing per-layer projection norm", "missing a whole layer", "Linear transposed", "Linear with extra rows",
    "double-wide MLP not double", "full-attention q_proj at sliding width", "norm of the wrong width",
    "1-D Linear", "2-D norm", "embedding table of the wrong vocabulary", "layer the config lacks",
    "k_proj in a KV-shared layer", "a bias Gemma 4 has not", "stray top-level tensor", "NaN in a norm",
    "inf in a norm", "-inf in layer_scalar", "config: hidden_size disagrees", "config: layer 0 says full attention",
    "config: fewer layers", "config: no KV sharing", "two defects at once", "integer norm",
}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good") / "src"
    return d, tiny.make_checkpoint(d)


def _defective(good, tmp_path, case):
    d = copy(good[0], tmp_path / "src")
    t = {n: v.clone() for n, v in good[1].items()}
    mutate, words = SOURCE_DEFECTS[case]
    mutate(d, t)
    rewrite(d, t)
    return d, words


@pytest.mark.parametrize("case", sorted(SOURCE_DEFECTS))
def test_build_refuses_a_defective_source_before_converting(good, tmp_path, capsys, case):
    d, words = _defective(good, tmp_path, case)
    out = tmp_path / "pkgs" / "emb4"
    rc, stdout, err = run(["build", "--source", str(d), "--out", str(out)], capsys)
    line = one_line(rc, err)
    for w in words:
        assert w in line, line
    assert "[1/" not in stdout  # not one tensor converted
    assert not (tmp_path / "pkgs").exists()


@pytest.mark.parametrize("case", sorted(OLD_BUILD_PACKS))
def test_check_refuses_the_package_the_unchecked_build_made(good, tmp_path, capsys, monkeypatch, case):
    import harness.package.build as b

    d, words = _defective(good, tmp_path, case)
    monkeypatch.setattr(b, "check_source", lambda *a, **k: None, raising=False)  # (absent before it)
    out = tmp_path / "pkg"
    build(str(d), str(out), SCHEMES["text"], log=lambda _: None)  # packs: the defect is in the package
    monkeypatch.undo()
    rc, stdout, err = run(["check", str(out)], capsys)
    assert rc == 1 and err == "", (rc, err)
    name = next(w for w in words if "." in w and " " not in w).replace(P, "model.")
    assert name in stdout, stdout
    assert stdout.strip().splitlines()[-1].startswith(f"{out}: ")


def test_the_defect_tables_cover_every_kind():
    assert OLD_BUILD_PACKS <= set(SOURCE_DEFECTS)
    assert len(SOURCE_DEFECTS) >= 35


def test_a_good_source_passes_and_says_so(good, tmp_path):
    lines = []
    build(str(good[0]), str(tmp_path / "pkg"), SCHEMES["emb4"], log=lines.append)
    assert any(ln.startswith("source checked:") and "all finite" in ln for ln in lines)
    assert lines.index(next(ln for ln in lines if ln.startswith("source checked:"))) < \
        lines.index(next(ln for ln in lines if ln.startswith("[1/")))


def test_finite_check_streams_row_chunks(good, tmp_path, capsys, monkeypatch):
    """The finite check reads tensors a few rows at a time; a chunk boundary moves no position."""
    import harness.package.tensors as tensors_mod

    monkeypatch.setattr(tensors_mod, "CHUNK_VALUES", 128 * 3)  # 3 rows of the per-layer table per step
    d, _ = _defective(good, tmp_path, "inf in the per-layer table's last row")
    rc, _, err = run(["build", "--source", str(d), "--out", str(tmp_path / "o")], capsys)
    assert "row 127, column 127" in one_line(rc, err)


# -- packages damaged on their own --------------------------------------------------------------

def _pkg_drop(*names):
    def f(d, t):
        for n in names:
            del t[n]
    return f


def _pkg_set(name, value):
    def f(d, t):
        t[name] = value
    return f


def _pkg_poke(name, value, index=0):
    def f(d, t):
        w = t[name].clone()
        w.view(-1)[index] = value
        t[name] = w
    return f


def _pkg_config(edit):
    def f(d, t):
        edit_config(d, edit)
    return f


Q = "model.layers.0.self_attn.q_proj"
PACKAGE_DEFECTS = {  # scheme, mutation, words in check's output
    "packed triple without its scale": ("emb4", _pkg_drop(f"{Q}.weight_scale"), [Q, "but not weight_scale"]),
    "packed triple without weight_shape": ("emb4", _pkg_drop(f"{Q}.weight_shape"), [Q, "not weight_shape"]),
    "whole packed Linear gone": ("emb4", _pkg_drop(f"{Q}.weight_packed", f"{Q}.weight_scale", f"{Q}.weight_shape"),
                                 [f"{Q}.weight", "missing"]),
    "weight_shape lies": ("emb4", _pkg_set(f"{Q}.weight_shape", torch.tensor([64, 96])),
                          [f"{Q}.weight_shape", "[64, 96]", "implies [64, 64]"]),
    "weight_packed too narrow": ("emb4", _pkg_set(f"{Q}.weight_packed", torch.zeros(64, 4, dtype=torch.int32)),
                                 [f"{Q}.weight_packed", "[64, 4]", "[64, 8]"]),
    "weight_packed as floats": ("emb4", _pkg_set(f"{Q}.weight_packed", torch.zeros(64, 8)), [f"{Q}.weight_packed", "F32"]),
    "scales per channel in a group scheme": ("emb4", _pkg_set(f"{Q}.weight_scale", torch.ones(64, 1, dtype=torch.bfloat16)),
                                             [f"{Q}.weight_scale", "[64, 2]"]),
    "NaN scale": ("emb4", _pkg_poke(f"{Q}.weight_scale", float("nan"), 3), [f"{Q}.weight_scale", "non-finite"]),
    "inf in a 16-bit table": ("text", _pkg_poke("model.embed_tokens.weight", float("inf"), 70),
                              ["model.embed_tokens.weight", "row 1, column 6"]),
    "both 16-bit and packed": ("emb4", _pkg_set(f"{Q}.weight", torch.ones(64, 64, dtype=torch.bfloat16)),
                               [f"{Q}.weight", "both as 16-bit and packed"]),
    "untied package without lm_head": ("emb4", _pkg_drop("lm_head.weight_packed", "lm_head.weight_scale",
                                                         "lm_head.weight_shape"),
                                       ["lm_head.weight", "missing", "unties"]),
    "config untied, no lm_head stored": ("text", _pkg_config(lambda c: c.update(tie_word_embeddings=False)),
                                         ["lm_head.weight", "missing"]),
    "extra layer": ("text", _pkg_set("model.layers.4.input_layernorm.weight", torch.ones(64, dtype=torch.bfloat16)),
                    ["model.layers.4.input_layernorm.weight", "layer 4"]),
    "config hidden_size changed": ("text", _pkg_config(lambda c: c.update(hidden_size=96)),
                                   ["model.embed_tokens.weight", "implies [128, 96]"]),
    "int8 channel scale of the wrong shape": ("int8", _pkg_set(f"{Q}.weight_scale", torch.ones(64, 2, dtype=torch.bfloat16)),
                                              [f"{Q}.weight_scale", "[64, 1]"]),
    "group size that does not divide the row": ("emb4", _pkg_config(
        lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=48)),
        [Q, "group_size 48"]),
}


@pytest.fixture(scope="module")
def packages(good, tmp_path_factory):
    src = good[0]
    out = {}
    for name in ("emb4", "text", "int8"):
        d = tmp_path_factory.mktemp("pkg") / name
        build(str(src), str(d), SCHEMES[name], log=lambda _: None)
        out[name] = d
    return out


@pytest.mark.parametrize("case", sorted(PACKAGE_DEFECTS))
def test_check_refuses_an_inconsistent_package(packages, tmp_path, capsys, case):
    scheme, mutate, words = PACKAGE_DEFECTS[case]
    d = copy(packages[scheme], tmp_path / "pkg")
    t = read_all(d)
    mutate(d, t)
    rewrite(d, t)
    rc, stdout, err = run(["check", str(d)], capsys)
    assert rc == 1 and err == "", (rc, err)
    for w in words:
        assert w in stdout, stdout


@pytest.mark.parametrize("scheme", ["emb4", "text", "int8"])
def test_check_passes_every_intact_package(packages, capsys, scheme):
    rc, stdout, err = run(["check", str(packages[scheme])], capsys)
    assert rc == 0, stdout + err
    assert json.loads((packages[scheme] / "manifest.json").read_text())["scheme"] == scheme
