"""The Gemma 4 E2B Neuron port's model code, run on CPU, against transformers' Gemma 4.

    python -m tests.neuron.port_check            # the port with the kit's patch (ami/patches)
    KIT_PORT_PATCH=off python -m tests.neuron.port_check   # the port as pinned: must fail
    python -m tests.neuron.port_check --json     # the figures as one JSON object

What runs: the port's own ``modeling_gemma4_e2b.py`` (the pinned file in tests/neuron/nxdi08/port,
patched with ``ami/patches/gemma4-e2b-port.patch`` by ``patch -p1`` as the image build does, then
imported from a temporary directory), on NxD Inference 0.8's real source (tests/neuron/nxdi08/src)
in its own CPU mode (``NeuronApplicationBase.to_cpu``: world size 1, gloo), loaded through the
port's own converter (``convert_hf_to_neuron_state_dict``, tied weights, NxDI's preshard hooks) and
driven by the engine's own runner (``ami/neuron/nxdi_slots.NxDISlotRunner``: one-row context
encodings into ``seq_ids`` slots, then batched token generation sorted by slot), with the
NeuronConfig the engine's own planner writes (``ami/neuron/neuron_config.plan``), shapes scaled
down.

Stood in (tests/neuron/nxdi08/nxd_world1.py, each at its real signature): the parts of
neuronx-distributed NxDI reaches at world size 1 (parallel linear/embedding layers, parallel
state, collectives of one rank, checkpoint preshard/shard, ``cpu_mode``), since that package is
on the Neuron pip repository only. torch_neuronx, NKI, the compiler, torch_xla: import-only stubs,
never run (the CPU mode and the kit's ``attn_kernel_enabled=False`` keep them off the path).

The model: a tiny random Gemma 4 text config with E2B's structure (every 5th layer global with a
wider head and proportional RoPE over a quarter of it, the last layers sharing K/V with the last
non-shared layer of their kind, per-layer inputs, a double-wide MLP on shared layers, tied
embeddings, logit soft-capping), a 16-token sliding window, prompts several windows long and at
least 3 windows of token generation. The reference is transformers' ``Gemma4ForCausalLM`` on the
same weights (the checkpoint the port loads is written from it).

Tolerance: both run in float32 (NxDI's CPU mode allows bf16 at one rank, but then the two
implementations round differently at every op and a 1e-2 disagreement would hide nothing useful);
the port keeps its per-layer embedding table in bfloat16 (its converter casts it), so the table is
rounded to bfloat16 before the reference sees it and both start from the same values. What is
left is float32 reassociation (different matmul fusion, attention as masked softmax over the
whole cache vs transformers' sliding mask, RMSNorm scale folded into the Q-norm weight by the
converter): measured at about 1e-5 of logits whose spread is ~10 (soft-capped at 30). The check
allows 2e-3 on any logit and requires the same argmax at every position; the defects it exists
for move logits by more than 0.1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NXDI08 = ROOT / "tests" / "neuron" / "nxdi08"
PORT_FILES = NXDI08 / "port"
PATCH = ROOT / "ami" / "patches" / "gemma4-e2b-port.patch"
PORT_SUBDIR = "contrib/models/gemma-4-E2B/src"  # the port's path in its repository (the patch's paths)
TOLERANCE = 2e-3

WINDOW = 16
E2B_CONFIG = ROOT / "tests" / "package" / "fixtures" / "gemma-4-E2B-it.config.json"  # Google's, recorded
# E2B's own text config with the widths scaled down: the same 35 layers in the same pattern (every
# 5th global), the last 20 sharing K/V (donors 13 and 14), double-wide MLPs on those, per-layer
# inputs, one KV head, a global head twice the sliding one with proportional RoPE on a quarter of
# it, tied embeddings, soft-capping. The port fixes the double-wide boundary at layer 15 of 35
# (``full_num_layers = 35``), so the layer count is E2B's and only widths shrink.
SCALED = dict(vocab_size=384, vocab_size_per_layer_input=384, hidden_size=64, intermediate_size=96,
              head_dim=32, global_head_dim=64, hidden_size_per_layer_input=8, sliding_window=WINDOW,
              max_position_embeddings=4096)


def tiny_text_config() -> dict:
    text = json.loads(E2B_CONFIG.read_text())["text_config"]
    return {**text, **SCALED, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1}


PROMPT_BUCKETS = (32, 96)
TOKEN_BUCKETS = (96, 192)
TOTAL = 192
SLOTS = 4
DECODE_STEPS = 3 * WINDOW + 8


class PortCheckError(RuntimeError):
    """The check could not run (not: the port disagreed); one line."""


@dataclass
class Case:
    name: str
    what: str
    max_diff: float = 0.0
    first_bad: int | None = None  # first position (absolute) whose logits differ or whose argmax differs
    positions: int = 0
    bad_positions: int = 0
    detail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.first_bad is None

    def record(self, pos: int, ours, ref) -> None:
        diff = float((ours - ref).abs().max())
        self.max_diff = max(self.max_diff, diff)
        self.positions += 1
        # A different argmax counts unless the reference itself had the two within tolerance
        # (random weights make near-ties; a flip inside the tolerance is not a disagreement).
        top = int(ours.argmax())
        bad = diff > TOLERANCE or float(ref.max() - ref[top]) > TOLERANCE
        self.bad_positions += bad
        if bad and self.first_bad is None:
            self.first_bad = pos
            self.detail.append(f"position {pos}: max |diff| {diff:.3g}, argmax {int(ours.argmax())} vs "
                               f"{int(ref.argmax())}")


# -- the port, patched or not, in a directory of its own ---------------------------------------------
def stage_port(dest: Path, patched: bool) -> Path:
    src = dest / PORT_SUBDIR
    src.mkdir(parents=True)
    for f in PORT_FILES.glob("*.py"):
        shutil.copy2(f, src / f.name)
    if patched:
        r = subprocess.run(["patch", "-p1", "--forward", "--batch", "-s", "-i", str(PATCH)], cwd=dest,
                           capture_output=True, text=True)
        if r.returncode != 0:
            out = (r.stdout + r.stderr).strip().splitlines()
            raise PortCheckError(f"{PATCH.relative_to(ROOT)} does not apply to the pinned port: "
                                 f"{out[0] if out else 'patch exit ' + str(r.returncode)}")
    return src


# -- the checkpoint and the reference ------------------------------------------------------------------
def write_checkpoint(model_dir: Path, seed: int = 0):
    """Random weights in transformers' Gemma4ForCausalLM, written as Google's checkpoint is laid out
    (Gemma4ForConditionalGeneration: ``model.language_model.*``, config under ``text_config``).
    Returns the reference model."""
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    text_dict = tiny_text_config()
    text = Gemma4TextConfig(**text_dict)
    torch.manual_seed(seed)
    ref = Gemma4ForCausalLM(text).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            # Norm weights start at zero/one in transformers; random ones make every path count.
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.3 + 1.0)
            # The port stores the per-layer embedding table in bfloat16 (its converter casts it):
            # give both implementations the same values.
            if name.endswith("embed_tokens_per_layer.weight"):
                p.copy_(p.to(torch.bfloat16).float())
    state = {}
    for k, v in ref.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied: Google's checkpoint has no lm_head
        state[k.replace("model.", "model.language_model.", 1)] = v.contiguous()
    # The KV-shared layers' own k_proj/v_proj/k_norm: unused by both implementations, but in the
    # checkpoint the port loads (transformers lists them in _keys_to_ignore_on_load_unexpected,
    # "drop all k/v proj and norms for the shared layers", modeling_gemma4.py Gemma4TextModel at
    # 5.23.0), and the port's attention loads K/V weights for every layer.
    layers = text_dict["num_hidden_layers"]
    for i in range(layers - text_dict["num_kv_shared_layers"], layers):
        hd = text_dict["global_head_dim"] if text_dict["layer_types"][i] == "full_attention" else text_dict["head_dim"]
        pre = f"model.language_model.layers.{i}.self_attn"
        for name in ("k_proj", "v_proj"):
            state[f"{pre}.{name}.weight"] = torch.randn(text_dict["num_key_value_heads"] * hd, SCALED["hidden_size"]) * 0.05
        state[f"{pre}.k_norm.weight"] = torch.ones(hd)
    model_dir.mkdir(parents=True, exist_ok=True)
    save_file(state, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    # config.json as Google writes it (global_head_dim and the rest flat in text_config), not as
    # transformers 5 serializes its config object (per_layer_config instead of global_head_dim).
    config = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
              "text_config": text_dict, "tie_word_embeddings": True}
    (model_dir / "config.json").write_text(json.dumps(config))
    return ref


# -- the port on CPU ------------------------------------------------------------------------------------------
def load_port(port_src: Path, model_dir: Path):
    """The NxDI application model of the port, on CPU, built the way the engine builds it."""
    import torch

    sys.path[:0] = [str(NXDI08), str(NXDI08 / "src"), str(port_src)]
    import nxd_world1

    nxd_world1.install()
    from ami.neuron import neuron_config as nc
    from ami.neuron.neuron_generator import construct_model

    cfg = nc.plan(json.loads((model_dir / "config.json").read_text()), neuron_cores=1, tp_degrees=(1,),
                  platform="inf2", shapes=nc.make_shapes(PROMPT_BUCKETS, TOTAL, SLOTS, TOKEN_BUCKETS),
                  sdk_version="0.8.0", model_name="tiny-e2b")
    model = construct_model(str(model_dir), cfg, str(port_src), "modeling_gemma4_e2b:NeuronGemma4E2BForCausalLM",
                            "modeling_gemma4_e2b:Gemma4E2BInferenceConfig", torch_dtype=torch.float32)
    model.to_cpu()
    # A compiled graph is traced once per bucket with ``n_positions`` set to that bucket
    # (model_wrapper.py get_trace_callable l.1684-1686 at cd3abf3); the CPU mode builds one module
    # per wrapper at the full length. Give the module the bucket the wrapper padded this call to
    # (the attention mask's width), as the graph for that bucket would have it.
    from neuronx_distributed_inference.models.model_wrapper import ModelWrapper

    traced = ModelWrapper._forward

    def forward_at_bucket(self, *args):
        self.model.n_positions = args[1].shape[-1]
        return traced(self, *args)

    ModelWrapper._forward = forward_at_bucket
    # NxD Inference 0.8's CPU path copies the KV cache back through _get_captured_tensors_offset
    # (model_base.py l.3827/3831 at cd3abf3), a method only NeuronBaseForImageToText defines
    # (image_to_text_model_base.py l.631): the same rule, read from the text model's config.
    # Neuron runs never take this branch (it is under ``not is_neuron()``).
    type(model)._get_captured_tensors_offset = lambda self: (
        self.neuron_config.tensor_capture_config.get_offset() if self.neuron_config.tensor_capture_config else 0)
    import neuron_stubs

    neuron_stubs.STRICT["on"] = True  # from here a Neuron-only stub reached at run time raises
    return model


def run(patched: bool, workdir: Path) -> list[Case]:
    import torch

    from ami.neuron.nxdi_slots import NxDISlotRunner

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    port_src = stage_port(workdir / "port", patched)
    ref = write_checkpoint(workdir / "ckpt")
    model = load_port(port_src, workdir / "ckpt")
    runner = NxDISlotRunner(model, SLOTS, PROMPT_BUCKETS[-1])
    gen = torch.Generator().manual_seed(1)
    vocab = SCALED["vocab_size"]

    def prompt(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=gen).tolist()

    @torch.no_grad()
    def ref_logits(ids: list[int]):
        return ref(input_ids=torch.tensor([ids])).logits[0].float()

    cases = []
    # 1. Context encoding: the logits at every position of a prompt 5 windows long (each prefix
    #    encoded on its own: the compiled context encoding returns its last position only).
    cte = Case("context", f"context encoding, every position of an {5 * WINDOW + 8}-token prompt "
                          f"({PROMPT_BUCKETS} buckets, window {WINDOW})")
    ids = prompt(5 * WINDOW + 8)
    full = ref_logits(ids)
    for n in range(1, len(ids) + 1):
        cte.record(n - 1, runner.prefill(0, ids[:n])[0], full[n - 1])
    cases.append(cte)

    # 2. One sequence: a prompt past the window, then 3+ windows of greedy token generation
    #    (teacher-forced with the reference's tokens, so one slip does not hide the next).
    def generate(case: Case, slot_prompts: dict[int, list[int]]) -> None:
        seqs = {}
        for slot, p in slot_prompts.items():
            first = runner.prefill(slot, p)[0]
            full = ref_logits(p)
            case.record(len(p) - 1, first, full[-1])
            seqs[slot] = p + [int(full[-1].argmax())]
        for _ in range(DECODE_STEPS):
            slots = sorted(seqs)
            out = runner.decode(slots, [seqs[s][-1] for s in slots])
            for row, slot in enumerate(slots):
                r = ref_logits(seqs[slot])[-1]
                case.record(len(seqs[slot]) - 1, out[row], r)
                seqs[slot].append(int(r.argmax()))
        for slot in slot_prompts:
            runner.release(slot)

    one = Case("long-context", f"one sequence: {3 * WINDOW + 5}-token prompt, {DECODE_STEPS} greedy tokens "
                               f"(to position {3 * WINDOW + 5 + DECODE_STEPS}, window {WINDOW})")
    generate(one, {0: prompt(3 * WINDOW + 5)})
    cases.append(one)

    # 3. Continuous batching: four slots at once, prompts of different lengths on both sides of
    #    the window, admitted out of slot order.
    many = Case("slots", f"{SLOTS} slots decoding together, prompts of 70/1/33/88 tokens, {DECODE_STEPS} steps")
    generate(many, {2: prompt(70), 0: prompt(1), 3: prompt(33), 1: prompt(88)})
    cases.append(many)

    # 4. Global layers alone: RoPE on the wide heads. The window covers every prompt here, so the
    #    sliding layers see what the global ones see and only the global layers' rotation can differ.
    short = Case("global-layers", f"prompts shorter than the window ({WINDOW - 4} tokens), logits at "
                                  f"every position: the global layers' RoPE")
    ids = prompt(WINDOW - 4)
    full = ref_logits(ids)
    for n in range(2, len(ids) + 1):
        short.record(n - 1, runner.prefill(1, ids[:n])[0], full[n - 1])
    cases.insert(0, short)
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.neuron.port_check", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args(argv)
    setting = os.environ.get("KIT_PORT_PATCH", "on")
    if setting not in ("on", "off"):
        print(f"KIT_PORT_PATCH={setting!r}: must be 'on' (the port with the kit's patch) or 'off' (as pinned)",
              file=sys.stderr)
        return 2
    patched = setting == "on"
    try:
        with tempfile.TemporaryDirectory(prefix="port-check-") as tmp:
            cases = run(patched, Path(tmp))
    except PortCheckError as e:
        print(f"port-check: {e}", file=sys.stderr)
        return 2
    label = "the port with ami/patches/gemma4-e2b-port.patch" if patched else "the port as pinned (no patch)"
    if args.json:
        print(json.dumps({"patched": patched, "tolerance": TOLERANCE,
                          "cases": [{**asdict(c), "ok": c.ok} for c in cases]}))
    else:
        print(f"port-check: {label}, float32 on CPU vs transformers Gemma4ForCausalLM, tolerance {TOLERANCE}")
        for c in cases:
            first = "none" if c.first_bad is None else str(c.first_bad)
            print(f"  {'ok  ' if c.ok else 'FAIL'} {c.name:14s} max |logit diff| {c.max_diff:.3g} over "
                  f"{c.positions} positions ({c.bad_positions} differ), first differing position {first}: {c.what}")
    failed = [c.name for c in cases if not c.ok]
    if failed:
        print(f"port-check: {label} disagrees with transformers in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
