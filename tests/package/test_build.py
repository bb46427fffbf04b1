"""emb4/ple4/text packages of a tiny Gemma-4-shaped checkpoint, decompressed by compressed-tensors
0.17.0's own model-free dequantizer, equal the source bit for bit; off-grid groups stop the build."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")

from safetensors import safe_open  # noqa: E402

from harness.package import layout  # noqa: E402
from harness.package.build import build  # noqa: E402
from harness.package.manifest import verify  # noqa: E402
from kit.schemes import SCHEMES  # noqa: E402
from harness.package.sizes import sizes  # noqa: E402
from tests.package import tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _read_all(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for n in h.keys():
                out[n] = h.get_tensor(n)
    return out


def _decompress(pkg: Path) -> dict:
    """compressed-tensors' own model-free dequantizer (entrypoints/convert, 0.17.0)."""
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    conv = CompressedTensorsDequantizer(str(pkg), dtype=torch.bfloat16)
    tensors = _read_all(pkg)
    conv.validate(tensors)
    return conv.process(tensors)


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("src") / "qat"
    return d, tiny.make_checkpoint(d)


@pytest.fixture(scope="module")
def emb4(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "emb4"
    lines = []
    manifest = build(str(source[0]), str(out), SCHEMES["emb4"], log=lines.append)
    return out, manifest, lines


def test_emb4_decompresses_bit_exact_for_every_tensor(source, emb4):
    _, src = source
    out, _, _ = emb4
    deq = _decompress(out)
    text = {n: t for n, t in src.items() if n.startswith(layout.MM_TEXT_PREFIX)}
    expected = {"model." + n[len(layout.MM_TEXT_PREFIX):]: t for n, t in text.items()}
    expected["lm_head.weight"] = text["model.language_model.embed_tokens.weight"]
    assert set(deq) == set(expected)  # towers gone, nothing else added or missing
    bad = [n for n in expected if not _same_bits(deq[n], expected[n])]
    assert bad == []


def test_emb4_stores_tables_and_lm_head_packed(emb4):
    out, manifest, _ = emb4
    names = set(_read_all(out))
    for module in ("model.embed_tokens", "model.embed_tokens_per_layer", "lm_head",
                   "model.layers.0.self_attn.q_proj", "model.per_layer_model_projection"):
        assert f"{module}.weight_packed" in names
        assert f"{module}.weight" not in names
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma4ForCausalLM"]
    assert cfg["tie_word_embeddings"] is False
    assert cfg["quantization_config"]["ignore"] == []
    assert cfg["quantization_config"]["config_groups"]["group_0"]["targets"] == ["Linear", "lm_head"]
    assert manifest["ignore_check"]["ok"] is True
    from compressed_tensors.quantization import QuantizationConfig

    QuantizationConfig.model_validate(cfg["quantization_config"])  # the library accepts it


def test_manifest_bytes_match_the_config_only_computation(emb4):
    _, manifest, _ = emb4
    computed = sizes(tiny.text_shapes(), SCHEMES["emb4"])
    assert manifest["bytes"] == computed
    assert manifest["source"]["revision"] == "local"
    assert manifest["scheme"] == "emb4"
    assert 0 < manifest["bytes_read_per_token"] < manifest["bytes"]["total"]


def test_manifest_hashes_every_file_and_carries_tokenizer_not_processor(emb4):
    out, manifest, _ = emb4
    assert verify(out) == []
    assert {"config.json", "tokenizer_config.json", "tokenizer.json", "chat_template.jinja",
            "model.safetensors.index.json"} <= set(manifest["files"])
    assert "processor_config.json" not in manifest["files"]
    (out / "chat_template.jinja").write_text("tampered")
    assert verify(out) == ["chat_template.jinja: sha256 differs from the manifest"]


def test_build_prints_per_table_bytes_off_grid_and_bit_identical_share(emb4):
    _, _, lines = emb4
    ple = [ln for ln in lines if ln.startswith("model.embed_tokens_per_layer.weight:")]
    assert len(ple) == 1
    assert "-> " in ple[0] and "int4; 0 off-grid groups; 100.00% bit-identical" in ple[0]


@pytest.mark.parametrize("name", ["ple4", "text"])
def test_ple4_and_text_keep_16bit_tables_and_ignore_tied_lm_head(source, tmp_path, name):
    _, src = source
    out = tmp_path / name
    build(str(source[0]), str(out), SCHEMES[name], log=lambda _: None)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True
    assert cfg["quantization_config"]["ignore"] == ["lm_head"]
    deq = _decompress(out)
    assert "lm_head.weight" not in deq
    for n, t in deq.items():
        assert _same_bits(t, src["model.language_model." + n[len("model."):]]), n
    stored = set(_read_all(out))
    packed_ple = "model.embed_tokens_per_layer.weight_packed" in stored
    assert packed_ple is (name == "ple4")
    assert "model.embed_tokens.weight" in stored


def test_finer_scales_still_on_grid_and_close(tmp_path):
    """Scales finer than bf16 (e.g. Q4_0's fp16): every group recovered, values within a bf16 step."""
    src_dir = tmp_path / "fine"
    src = tiny.make_checkpoint(src_dir, seed=3, scale_dtype=torch.float32)
    out = tmp_path / "pkg"
    build(str(src_dir), str(out), SCHEMES["emb4"], log=lambda _: None)
    deq = _decompress(out)
    for n, t in deq.items():
        if n == "lm_head.weight":
            continue
        ref = src["model.language_model." + n[len("model."):]].float()
        step = ref.abs() * 2**-7 + 1e-30
        assert bool(((t.float() - ref).abs() <= step).all()), n


def test_off_grid_group_refused_in_one_line_nothing_left(tmp_path):
    src_dir = tmp_path / "bad"
    tensors = tiny.make_checkpoint(src_dir, seed=1)
    name = "model.language_model.layers.2.mlp.down_proj.weight"
    w = tensors[name].clone()
    w[3, 40] = w[3, 40] + w[3, 32:64].abs().max() * 0.37  # off the grid in row 3, group 1
    index = json.loads((src_dir / "model.safetensors.index.json").read_text())
    fname = index["weight_map"][name]
    from safetensors.torch import save_file

    shard = {n: tensors[n] for n, f in index["weight_map"].items() if f == fname}
    shard[name] = w
    save_file(shard, str(src_dir / fname), metadata={"format": "pt"})
    out = tmp_path / "pkgs" / "emb4"
    r = subprocess.run([sys.executable, "-m", "harness.package", "build", "--source", str(src_dir),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    assert name in err[0] and "group 1 of row 3" in err[0]
    assert "Traceback" not in r.stderr
    assert not out.exists()
    assert not (tmp_path / "pkgs").exists()  # no partial directory, nor the parent the build made


@pytest.mark.parametrize("remove, word", [("chat_template.jinja", "no chat template"),
                                          ("tokenizer.json", "no tokenizer.json")])
def test_source_without_tokenizer_or_chat_template_refused_before_packing(tmp_path, remove, word):
    src_dir = tmp_path / "src"
    tiny.make_checkpoint(src_dir)
    (src_dir / remove).unlink()
    out = tmp_path / "pkgs" / "emb4"
    r = subprocess.run([sys.executable, "-m", "harness.package", "build", "--source", str(src_dir),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert word in line and "layers" not in r.stdout  # refused before any tensor was packed
    assert not (tmp_path / "pkgs").exists()  # nor the parent directory the build made


def test_a_template_in_tokenizer_config_is_enough(tmp_path):
    src_dir = tmp_path / "src"
    tiny.make_checkpoint(src_dir)
    (src_dir / "chat_template.jinja").unlink()
    (src_dir / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    build(str(src_dir), str(tmp_path / "out"), SCHEMES["text"], log=lambda _: None)
    assert (tmp_path / "out" / "tokenizer_config.json").is_file()


def test_existing_destination_refused(source, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "x").write_text("keep")
    r = subprocess.run([sys.executable, "-m", "harness.package", "build", "--source", str(source[0]),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not empty" in r.stderr
    assert (out / "x").read_text() == "keep"


def test_check_command_passes_a_package_and_flags_a_missing_ignore_entry(source, tmp_path):
    out = tmp_path / "text"
    build(str(source[0]), str(out), SCHEMES["text"], log=lambda _: None)
    r = subprocess.run([sys.executable, "-m", "harness.package", "check", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ignored 16-bit Linears")
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"]["ignore"] = []  # the tied 16-bit lm_head no longer named
    (out / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, "-m", "harness.package", "check", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "lm_head: tied to 16-bit embeddings but not on the ignore list" in r.stdout
    assert "config.json: sha256 differs from the manifest" in r.stdout


def test_int8_rounds_to_nearest_per_channel_from_bf16(tmp_path):
    src_dir = tmp_path / "bf16"
    src = tiny.make_checkpoint(src_dir, seed=5)
    gen = torch.Generator().manual_seed(9)
    for n in list(src):  # off-grid bf16 weights, as in the bf16 release
        if src[n].ndim == 2:
            src[n] = torch.randn(src[n].shape, generator=gen).to(torch.bfloat16)
    from safetensors.torch import save_file

    index = json.loads((src_dir / "model.safetensors.index.json").read_text())
    for fname in set(index["weight_map"].values()):
        save_file({n: src[n] for n, f in index["weight_map"].items() if f == fname}, str(src_dir / fname),
                  metadata={"format": "pt"})
    out = tmp_path / "int8"
    manifest = build(str(src_dir), str(out), SCHEMES["int8"], log=lambda _: None)
    cfg = json.loads((out / "config.json").read_text())
    args = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]
    assert (args["num_bits"], args["strategy"]) == (8, "channel")
    deq = _decompress(out)
    for n, t in deq.items():
        ref = src["model.language_model." + n[len("model."):]].float()
        if n.endswith(("embed_tokens.weight", "embed_tokens_per_layer.weight")) or ref.ndim != 2:
            assert _same_bits(t, ref.to(torch.bfloat16)), n
            continue
        step = ref.abs().amax(dim=1, keepdim=True) / 127
        assert bool(((t.float() - ref).abs() <= step * 0.51 + ref.abs() * 2**-8).all()), n
    assert manifest["bytes"]["linear"] < manifest["source_bytes"]["linear"] * 0.55


@pytest.mark.parametrize("name", ["emb4", "text"])
def test_transformers_loads_the_package_as_gemma4_for_causal_lm(source, tmp_path, name):
    """transformers 5.23 + compressed-tensors 0.17.0 load the package (config layout, ignore list,
    untied/tied lm_head) to the source's exact values and run a forward pass."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    _, src = source
    out = tmp_path / name
    build(str(source[0]), str(out), SCHEMES[name], log=lambda _: None)
    m = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16,
                                             quantization_config=CompressedTensorsConfig(dequantize=True))
    assert type(m).__name__ == "Gemma4ForCausalLM"
    sd = m.state_dict()
    for n, t in src.items():
        if n.startswith(layout.MM_TEXT_PREFIX):
            assert _same_bits(sd["model." + n[len(layout.MM_TEXT_PREFIX):]], t), n
    assert _same_bits(sd["lm_head.weight"], src["model.language_model.embed_tokens.weight"])
    logits = m(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, tiny.TEXT_CONFIG["vocab_size"]) and bool(torch.isfinite(logits).all())


def test_row_chunks_recover_the_same_package(source, tmp_path, monkeypatch):
    """The build recovers big tables in row chunks; chunk boundaries change nothing."""
    import harness.package.build as b

    monkeypatch.setattr(b, "ROW_CHUNK_VALUES", 64 * 3)  # 3 rows of the 64-wide tables per chunk
    out = tmp_path / "chunked"
    build(str(source[0]), str(out), SCHEMES["emb4"], log=lambda _: None)
    _, src = source
    deq = _decompress(out)
    for n, t in deq.items():
        ref = src["model.language_model.embed_tokens.weight"] if n == "lm_head.weight" else \
            src["model.language_model." + n[len("model."):]]
        assert _same_bits(t, ref), n


def test_moe_expert_tensors_are_refused_not_half_packed(tmp_path):
    src_dir = tmp_path / "moe"
    tiny.make_checkpoint(src_dir, seed=2)
    from safetensors.torch import save_file

    save_file({"model.language_model.layers.0.experts.gate_up_proj": torch.zeros(2, 64, 64, dtype=torch.bfloat16)},
              str(src_dir / "experts.safetensors"))
    index = json.loads((src_dir / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.language_model.layers.0.experts.gate_up_proj"] = "experts.safetensors"
    (src_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    r = subprocess.run([sys.executable, "-m", "harness.package", "build", "--source", str(src_dir),
                        "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "mixture-of-experts" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_q4_0_signed_scales_recovered_bit_exact(tmp_path):
    """llama.cpp's Q4_0 makes the scale negative when a group's largest value is positive (its
    +8 steps are -8 times a negative scale): recovered, stored as is, decompressed bit for bit."""
    src_dir = tmp_path / "signed"
    src = tiny.make_checkpoint(src_dir, seed=4, signed=True)
    out = tmp_path / "pkg"
    build(str(src_dir), str(out), SCHEMES["emb4"], log=lambda _: None)
    scales = _read_all(out)["model.embed_tokens_per_layer.weight_scale"]
    assert bool((scales < 0).any()) and bool((scales > 0).any())
    deq = _decompress(out)
    for n, t in deq.items():
        ref = src["model.language_model.embed_tokens.weight"] if n == "lm_head.weight" else \
            src["model.language_model." + n[len("model."):]]
        assert _same_bits(t, ref), n
