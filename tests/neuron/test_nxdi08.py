"""The engine's NxD Inference imports and the Gemma 4 port, against NxD Inference 0.8's real
source (tests/neuron/vendored_nxdi_0_8, PROVENANCE.md there), under the transformers the Neuron image pins.

The image pins transformers 4.57.6 (kit/pins.py ENGINE_TRANSFORMERS); this repository's own
environment has transformers 5 (requirements-engine.txt, the CPU backend). A throwaway venv under
the test's tmp dir gets the image's transformers, tokenizers and huggingface_hub from uv (about a
second with uv's cache; PyPI or the machine's package cache otherwise) and sees everything else
(torch, numpy, safetensors, Jinja2) through a .pth to this environment, listed after its own
packages, so its transformers is the one imported. Neuron-only packages are stubbed at the import
boundary (vendored_nxdi_0_8/neuron_stubs.py), nothing else.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from kit import pins

# The throwaway venv's three wheels come from uv's cache, else PyPI: the one network tests may use.
pytestmark = [pytest.mark.network, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
PROBE = HERE / "vendored_nxdi_0_8" / "probe.py"


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        pytest.fail(f"uv not found: install the dev requirements (uv=={pins.UV_VERSION})")
    return found


@pytest.fixture(scope="module")
def image_python(tmp_path_factory) -> str:
    """A Python whose transformers, tokenizers and huggingface_hub are the Neuron image's."""
    venv = tmp_path_factory.mktemp("tf457") / "venv"
    t0 = time.monotonic()
    subprocess.run([uv(), "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    r = subprocess.run([uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                        *pins.ENGINE_TRANSFORMERS], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "zz_kit_dev_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    print(f"throwaway venv with {' '.join(pins.ENGINE_TRANSFORMERS)}: {time.monotonic() - t0:.1f}s")
    return str(venv / "bin" / "python")


@pytest.fixture(scope="module")
def gemma4_dir(tmp_path_factory) -> str:
    """A Gemma 4 checkpoint directory shaped as the real one (model_type gemma4, text_config nested),
    tiny and random, written with this environment's transformers 5 (as Google's files are)."""
    from transformers import Gemma4Config

    from ami.neuron import tiny

    d = tmp_path_factory.mktemp("gemma4")
    tiny.save(str(d))
    text = json.loads((d / "config.json").read_text())
    text.pop("architectures", None)
    config = Gemma4Config(text_config=text).to_dict()
    config["architectures"] = ["Gemma4ForConditionalGeneration"]
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


@pytest.fixture(scope="module")
def on_image(image_python, gemma4_dir) -> dict:
    """The probe's three runs under the image's transformers, in one process (imports dominate)."""
    return probe(image_python, "all", gemma4_dir)


def probe(python: str, *args: str) -> dict:
    r = subprocess.run([python, str(PROBE), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_nxd_inference_module_the_engine_and_port_import_loads_under_the_pinned_transformers(on_image):
    out = on_image["imports"]
    assert out["transformers"] == pins.ENGINE_TRANSFORMERS[0].split("==")[1]
    assert out["modules"] and all(v == "ok" for v in out["modules"].values()), out["modules"]


def test_transformers_5_lacks_what_nxd_inference_08_imports():
    """Why the image does not keep transformers 5: hf_adapter's import of SampleDecoderOnlyOutput."""
    import transformers

    assert transformers.__version__.startswith("5.")
    out = probe(sys.executable, "imports")
    assert "SampleDecoderOnlyOutput" in out["modules"]["neuronx_distributed_inference.utils.hf_adapter"]


def test_the_engine_config_and_the_port_construct_on_nxd_inference_08(on_image):
    out = on_image["compat"]
    assert "config_error" not in out and "tokenizer_error" not in out, out
    assert out["is_neuron_config"] and out["neuron_config_cls"] == "modeling_gemma4_e2b.Gemma4E2BNeuronConfig"
    nc = out["neuron_config"]
    # The kit's NeuronConfig kwargs (ami/neuron/neuron_config.py) as 0.8's NeuronConfig keeps them,
    # with the validated inf2 settings (kit/neuron_facts.py INF2_SETTINGS).
    assert (nc["tp_degree"], nc["batch_size"], nc["seq_len"], nc["max_context_length"]) == (2, 2, 256, 128)
    assert nc["attn_kernel_enabled"] is False and nc["fused_qkv"] is False and nc["logical_nc_config"] == 1
    assert nc["context_encoding_buckets"] == [128] and nc["padding_side"] == "right"
    assert nc["torch_dtype"] == "torch.bfloat16"
    # continuous batching (ami/neuron/nxdi_slots.py): context encoding one sequence at a time,
    # token generation and the KV cache over the whole batch
    assert nc["is_continuous_batching"] is True and nc["ctx_batch_size"] == 1
    assert nc["tkg_batch_size"] == nc["max_batch_size"] == nc["batch_size"] == 2
    c = out["config"]
    assert c["num_hidden_layers"] == 2 and c["layer_types"] == ["sliding_attention", "full_attention"]
    assert c["hidden_size_per_layer_input"] == 16 and c["torch_dtype"] == "torch.bfloat16"
    t = out["tokenizer"]
    assert t["decoded"].startswith("<bos><|turn>user\nHello<turn|>") and t["first_ids"][1] == t["turn_id"]


def test_without_the_kits_compat_loaders_gemma4_does_not_load_under_the_pinned_transformers(on_image):
    """NxD Inference's load_pretrained_config and AutoTokenizer, on transformers 4.57 and a Gemma 4
    checkpoint: what ami/neuron/nxdi_compat.py exists for."""
    out = on_image["without"]
    assert "gemma4" in out["config_error"]
    assert "tokenizer_error" in out


def test_transformers_imports_the_installed_torchvision_on_nxd_inferences_import_path(image_python, tmp_path):
    """Why the image installs torchvision's CPU build (kit/pins.py): transformers 4.57.6 imports
    torchvision whenever it is installed (and Pillow, which NxD Inference requires), on the way to
    every PreTrainedModel (modeling_utils -> loss_for_object_detection -> image_transforms ->
    image_utils), so a torchvision that cannot load takes hf_adapter down with it. The stand-in
    fails at import as PyPI's CUDA build does next to a CPU torch (torchvision/_meta_registrations.py
    registers a fake for torchvision::nms, which does not exist when its _C.so did not load)."""
    pkg = tmp_path / "torchvision"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    info = tmp_path / "torchvision-0.24.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.24.0\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([image_python, str(PROBE), "imports"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    hf_adapter = json.loads(r.stdout.strip().splitlines()[-1])["modules"]["neuronx_distributed_inference.utils.hf_adapter"]
    assert "PreTrainedModel" in hf_adapter, hf_adapter  # transformers' lazy import wraps the cause:
    r = subprocess.run([image_python, "-c", "import transformers.modeling_utils"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode != 0 and "torchvision::nms" in r.stderr and "image_utils" in r.stderr, r.stderr[-3000:]
