"""A pinned checkpoint reaches every path that downloads weights, as synthesized.

One synthesis with a commit pinned per repository (``-c model_revision=REPO=SHA,...``), the g6
image prebuilt (its weights pre-pulled) and a g6 variant serving a package; then, from the
templates: the EC2 boot scripts as the user data writes them, run against stand-ins of ``hf`` and
``vllm``, download that commit and hand vLLM --revision/--tokenizer-revision (g6, g5g) or the
Neuron engine a checkpoint of that commit (inf2, trn1); the SageMaker model's environment carries
SM_VLLM_REVISION and SM_VLLM_TOKENIZER_REVISION; both image components are given the commit and
download it (run with the synthesized parameters), and the AMIs are tagged with it; the package
build's environment pins the package source's commit and its buildspec takes it. A commit that is
not 40 hex characters stops synth in one line.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kit.catalog import BACKENDS, GEMMA_E2B, GEMMA_E2B_INT4
from kit.schemes import QAT_SOURCE
from tests.stacks.conftest import ROOT, SYSTEMD_PATH, config_error, synth
from tests.stacks.hf_stand_in import fake_hf
from tests.stacks.test_ec2_backends import kit_env, user_data
from tests.stacks.test_images import _by_name, _recipe_components

BF16_SHA, INT4_SHA, QAT_SHA = "1" * 40, "2" * 40, "3" * 40
PINS = f"{GEMMA_E2B}={BF16_SHA},{GEMMA_E2B_INT4}={INT4_SHA},{QAT_SOURCE}={QAT_SHA}"
SHA = {GEMMA_E2B: BF16_SHA, GEMMA_E2B_INT4: INT4_SHA}  # the commit PINS gives each default model
# The EC2 backends per engine, from the catalog: each row boots with its default model pinned.
VLLM_EC2 = [b for b in BACKENDS.values() if b.service == "ec2" and b.engine_kind == "vllm"]
NEURON_EC2 = [b for b in BACKENDS.values() if b.service == "ec2" and b.engine_kind == "neuron"]
PARAM_REF = re.compile(r"\{\{\s*([A-Za-z0-9_.:-]+)\s*\}\}")


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("cdk-out-pinned"), model_revision=PINS, g6_image="prebuilt",
                 g6_variants="emb4=package:emb4")


def _instance(kit, stack: str) -> dict:
    (instance,) = kit.resources(stack, "AWS::EC2::Instance").values()
    return instance


def _written(text: str, path: str) -> str:
    """A file the user data writes with cat >PATH <<'KIT_EOF'."""
    return text.split(f"cat >{path} <<'KIT_EOF'\n", 1)[1].split("\nKIT_EOF", 1)[0]


def _boot(kit, stack: str, tmp_path: Path, **env_over: str) -> tuple[list[str], list[str], dict]:
    """engine_exec as the stack's user data writes it, against stand-ins: (hf calls, the engine's
    arguments, the served-model record). The engine stand-in also writes its HF_HUB_OFFLINE to
    ``tmp_path/engine-offline``."""
    text = user_data(_instance(kit, stack))
    env = {k: v.strip("'") for k, v in kit_env(text).items()} | env_over
    opt = tmp_path / "opt"
    scripts = {name: _written(text, f"/usr/local/lib/inference-kit/{name}").replace("/opt/inference-kit", str(opt))
               .replace("/etc/inference-kit", str(tmp_path / "etc")) for name in ("lib.sh", "engine.sh")}
    for name, body in scripts.items():
        (tmp_path / name).write_text(body)
    calls, served = tmp_path / "hf-calls", tmp_path / "engine-args"
    for venv in ("vllm", "neuron"):
        fake_hf(opt / venv / "bin/hf", calls)
        for exe in ("vllm", "kit-neuron-serve"):
            (opt / venv / "bin" / exe).write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {served}\n'
                                                  f'echo "${{HF_HUB_OFFLINE:-}}" > {tmp_path}/engine-offline\n')
            (opt / venv / "bin" / exe).chmod(0o755)
    r = subprocess.run(["bash", "-c", f"set -euo pipefail; . {tmp_path}/lib.sh; . {tmp_path}/engine.sh; engine_exec"],
                       env={**env, "PATH": SYSTEMD_PATH, "KIT_LOG_DIR": str(tmp_path), "KIT_STATE_DIR": str(tmp_path),
                            "KIT_SERVED_RECORD": str(tmp_path / "served.json")},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return (calls.read_text().splitlines(), served.read_text().splitlines(),
            json.loads((tmp_path / "served.json").read_text()))


@pytest.mark.parametrize("stack,model,sha", [(b.stack_name, b.model_id, SHA[b.model_id]) for b in VLLM_EC2])
def test_vllm_on_ec2_downloads_and_serves_the_pinned_commit(pinned, tmp_path, stack, model, sha):
    env = kit_env(user_data(_instance(pinned, stack)))
    assert env["KIT_MODEL_REVISION"].strip("'") == sha
    hf, args, record = _boot(pinned, stack, tmp_path)
    assert hf == [f"hf download {model} --revision {sha}"]  # no resolve: the pin is the commit
    assert args[args.index("--revision") + 1] == args[args.index("--tokenizer-revision") + 1] == sha
    assert args[:2] == ["serve", model]
    assert (record["model"], record["revision"], record["how"]) == (model, sha, "pinned")
    assert record["digest"] and record["files"] == ["config.json", "tokenizer.json"]


def test_vllm_serving_the_images_own_commit_asks_no_hub(pinned, tmp_path):
    """Unpinned, on the vllm-cuda image: the commit the image pre-pulled is served offline
    (HF_HUB_OFFLINE=1 for the download check and for vLLM), so a shared image boots without a
    Hugging Face token; any other commit goes to the Hub as before."""
    g6 = next(b for b in VLLM_EC2 if b.image == "gpu-x86")  # g6_image=prebuilt in this fixture
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "prepulled-model").write_text(g6.model_id + "\n")
    (etc / "prepulled-revision").write_text(BF16_SHA + "\n")
    hf, args, record = _boot(pinned, g6.stack_name, tmp_path, KIT_MODEL_REVISION="")
    assert (record["revision"], record["how"]) == (BF16_SHA, "image")
    assert hf == [f"hf download {g6.model_id} --revision {BF16_SHA}"]
    assert (tmp_path / "engine-offline").read_text().strip() == "1"
    (etc / "prepulled-model").write_text("someone/else\n")  # the image holds another model
    (tmp_path / "model-revision").unlink()
    _boot(pinned, g6.stack_name, tmp_path, KIT_MODEL_REVISION="")
    assert (tmp_path / "engine-offline").read_text().strip() == ""


@pytest.mark.parametrize("stack,model,sha", [(b.stack_name, b.model_id, SHA[b.model_id]) for b in NEURON_EC2],
                         ids=[b.stack_name for b in NEURON_EC2])
def test_the_neuron_engine_gets_a_checkpoint_of_the_pinned_commit(pinned, tmp_path, stack, model, sha):
    hf, args, record = _boot(pinned, stack, tmp_path)
    ckpt = tmp_path / "opt/models" / model
    assert hf == [f"hf download {model} --revision {sha} --local-dir {ckpt}"]
    assert args[args.index("--model") + 1] == str(ckpt)
    assert (ckpt / ".kit-revision").read_text().strip() == sha
    assert (record["revision"], record["how"]) == (sha, "pinned")


def test_outputs_name_the_pin(pinned):
    for stack, sha in (("G6Stack", INT4_SHA), ("G5gStack", BF16_SHA), ("Inf2Stack", BF16_SHA),
                       ("SageMakerStack", INT4_SHA), ("G6Stack-emb4", QAT_SHA)):
        assert pinned.templates[stack]["Outputs"]["ModelRevision"]["Value"] == sha, stack


def test_sagemaker_passes_the_commit_to_vllm(pinned):
    (model,) = pinned.resources("SageMakerStack", "AWS::SageMaker::Model").values()
    env = model["Properties"]["PrimaryContainer"]["Environment"]
    assert env["SM_VLLM_MODEL"] == GEMMA_E2B_INT4
    # The DLC's entrypoint: SM_VLLM_FOO_BAR=v -> --foo-bar v (stacks/sagemaker.py cites it).
    flags = {"--" + k.removeprefix("SM_VLLM_").lower().replace("_", "-"): v for k, v in env.items()
             if k.startswith("SM_VLLM_")}
    assert flags["--revision"] == flags["--tokenizer-revision"] == INT4_SHA


def _component_step(kit, stack: str, recipe: str, component: str, doc: str, step: str) -> tuple[str, dict]:
    import yaml

    params = _recipe_components(kit, stack, _by_name(kit, stack, "AWS::ImageBuilder::ImageRecipe")[recipe])[component]
    d = yaml.safe_load((ROOT / "ami/components" / doc).read_text())
    (script,) = [s["inputs"]["commands"][0] for p in d["phases"] for s in p["steps"] if s["name"] == step]
    return script, params


def _run_step(script: str, params: dict, root: Path) -> subprocess.CompletedProcess:
    text = PARAM_REF.sub(lambda m: params[m.group(1)], script)
    for path in ("/opt/inference-kit", "/etc/inference-kit"):
        text = text.replace(path, f"{root}{path}")
    (root / "etc/inference-kit").mkdir(parents=True, exist_ok=True)
    if "/assets/scripts/" in text:
        (root / "opt/inference-kit/assets").mkdir(parents=True, exist_ok=True)
        import shutil

        shutil.copytree(ROOT / "ami/scripts", root / "opt/inference-kit/assets/scripts", dirs_exist_ok=True)
        text = f"export KIT_IMAGE_ROOT={root}\n{text}"
    return subprocess.run(["/bin/bash", "-c", text], env={"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=60)


def test_the_g6_image_prepulls_the_pinned_commit(pinned, tmp_path):
    script, params = _component_step(pinned, "VllmCudaImageStack", "inference-kit-vllm-cuda-build",
                                     "inference-kit-vllm-cuda", "vllm-cuda.yaml", "PrePullWeights")
    assert (params["PrePullModel"], params["ModelRevision"]) == (GEMMA_E2B_INT4, INT4_SHA)
    root = tmp_path / "root"
    fake_hf(root / "opt/inference-kit/vllm/bin/hf", tmp_path / "calls")
    r = _run_step(script, {**params, "HfTokenSecret": "none"}, root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [f"hf download {GEMMA_E2B_INT4} --revision {INT4_SHA}"]
    assert (root / "etc/inference-kit/prepulled-revision").read_text().strip() == INT4_SHA


def test_the_neuron_image_compiles_the_pinned_commit(pinned, tmp_path):
    script, params = _component_step(pinned, "NeuronImageStack", "inference-kit-neuron-build",
                                     "inference-kit-neuron-engine", "neuron-engine.yaml", "PrecompileModel")
    assert (params["PrecompileModel"], params["ModelRevision"]) == (GEMMA_E2B, BF16_SHA)
    root = tmp_path / "root"
    fake_hf(root / "opt/inference-kit/neuron/bin/hf", tmp_path / "calls")
    launcher = root / "opt/inference-kit/neuron/bin/kit-neuron-serve"
    launcher.write_text("#!/bin/bash\n")
    launcher.chmod(0o755)
    r = _run_step(script, {**params, "HfTokenSecret": "none"}, root)
    assert r.returncode == 0, r.stdout + r.stderr
    ckpt = root / "opt/inference-kit/models" / GEMMA_E2B
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"hf download {GEMMA_E2B} --revision {BF16_SHA} --local-dir {ckpt}"]
    assert (ckpt / ".kit-revision").read_text().strip() == BF16_SHA


def test_the_g5g_image_test_serves_the_pinned_commit(pinned):
    script, params = _component_step(pinned, "VllmSm75ImageStack", "inference-kit-vllm-sm75-gpu-test",
                                     "inference-kit-vllm-sm75-gpu-test", "vllm-sm75-gpu-test.yaml", "ServeOneCompletion")
    assert (params["Model"], params["ModelRevision"]) == (GEMMA_E2B, BF16_SHA)
    assert '${rev:+--revision "$rev" --tokenizer-revision "$rev"}' in script


def test_the_images_are_tagged_with_the_commit_they_hold(pinned):
    for stack, model, sha in (("VllmCudaImageStack", GEMMA_E2B_INT4, INT4_SHA), ("NeuronImageStack", GEMMA_E2B, BF16_SHA)):
        (dist,) = pinned.resources(stack, "AWS::ImageBuilder::DistributionConfiguration").values()
        tags = dist["Properties"]["Distributions"][0]["AmiDistributionConfiguration"]["AmiTags"]
        assert (tags["kit-model"], tags["kit-model-revision"]) == (model, sha), stack


def test_the_package_build_takes_the_pinned_source_commit(pinned, tmp_path):
    (project,) = pinned.resources("PackageStack", "AWS::CodeBuild::Project").values()
    env = {v["Name"]: v.get("Value") for v in project["Properties"]["Environment"]["EnvironmentVariables"]}
    assert env["PINNED_REVISIONS"] == f"emb4={QAT_SHA}"
    spec = json.loads(project["Properties"]["Source"]["BuildSpec"]) if project["Properties"]["Source"]["BuildSpec"] \
        .lstrip().startswith("{") else __import__("yaml").safe_load(project["Properties"]["Source"]["BuildSpec"])
    commands = spec["phases"]["build"]["commands"]
    pick = [c for c in commands if "PINNED_REVISIONS" in c]
    assert pick, commands

    def revision(**given: str) -> str:
        run = {"SCHEME": "emb4", "SOURCE": "", "REVISION": "", "PINNED_REVISIONS": env["PINNED_REVISIONS"], **given}
        r = subprocess.run(["bash", "-c", "; ".join(pick) + '; printf %s "$REVISION"'], env={**run, "PATH": SYSTEMD_PATH},
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert revision() == QAT_SHA
    assert revision(REVISION="9" * 40) == "9" * 40  # harness package start --revision wins
    assert revision(SOURCE="someone/other") == ""  # another source: the pin is not its commit
    assert revision(SCHEME="int8") == ""  # no pin for that scheme's source


@pytest.mark.parametrize("key,value", [("model_revision", "main"), ("model_revision", "abc123"),
                                       ("g6_model_revision", "z" * 40), ("inf2_model_revision", "1" * 41)])
def test_a_revision_that_is_not_a_commit_is_one_line(key, value):
    msg = config_error(**{key: value})
    assert msg.startswith(f"{key}={value!r} is not a commit id (40 hex characters")


def test_app_refuses_it_at_synth_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "app.py"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PATH": SYSTEMD_PATH, "CDK_CONTEXT_JSON": json.dumps({"model_revision": "v1.0"}),
                            "CDK_OUTDIR": str(tmp_path), "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"})
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "model_revision" in ln]
    assert len(lines) == 1 and "is not a commit id" in lines[0], r.stderr
