"""The Gemma 4 E2B Neuron port's model code, run on CPU, against transformers' Gemma 4.

    python -m tests.neuron.port_check            # the port with the kit's patch (ami/neuron-port)
    KIT_PORT_PATCH=off python -m tests.neuron.port_check   # the port as pinned: must fail
    python -m tests.neuron.port_check --json     # the figures as one JSON object

What runs: the port's own ``modeling_gemma4_e2b.py`` (the pinned file in tests/neuron/vendored_nxdi_0_8/port,
patched with ``ami/neuron-port/gemma4-e2b-port.patch`` by ``git apply`` as the image build does, then
imported from a temporary directory), on NxD Inference 0.8's real source (tests/neuron/vendored_nxdi_0_8/src)
in its own CPU mode (``NeuronApplicationBase.to_cpu``: world size 1, gloo), loaded through the
port's own converter (``convert_hf_to_neuron_state_dict``, tied weights, NxDI's preshard hooks) and
driven by the engine's own runner (``ami/neuron/nxdi_slots.NxDISlotRunner``: one-row context
encodings into ``seq_ids`` slots, then batched token generation sorted by slot), with the
NeuronConfig the engine's own planner writes (``ami/neuron/neuron_config.plan``), shapes scaled
down.

Stood in (tests/neuron/vendored_nxdi_0_8/nxd_world1.py, each at its real signature): the parts of
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

Tolerance: the port runs in float32, the reference in float64 (NxDI's CPU mode allows bf16 at one rank, but then the two
implementations round differently at every op and a 1e-2 disagreement would hide nothing useful);
the port keeps its per-layer embedding table in bfloat16 (its converter casts it), so the table is
rounded to bfloat16 before the reference sees it and both start from the same values. What is
left is the port's float32 rounding (different matmul grouping, attention as a masked softmax
over the whole cache against transformers' sliding mask, the converter folding sqrt(head_dim)
into the Q-norm weight): measured 2e-6 (context encoding) to 1.6e-5 (50 decode steps, 4 slots)
against the float64 reference, on logits of magnitude ~1. The check allows 2e-3 on any logit and
the same argmax unless the reference's top two are within that; the defects it exists for move
logits by 0.14 to 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NXDI08 = ROOT / "tests" / "neuron" / "vendored_nxdi_0_8"
PORT_FILES = NXDI08 / "port"
PATCH = ROOT / "ami" / "neuron-port" / "gemma4-e2b-port.patch"
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
DECODE_STEPS = 3 * WINDOW + 2  # at least 3 windows of token generation
CONTEXT_LEN = 2 * WINDOW + 8
ONE_PROMPT = 3 * WINDOW + 5
SLOT_ORDER = (2, 0, 3, 1)  # admitted out of slot order
SLOT_PROMPTS = (70, 1, 33, 88)  # both sides of the window; a one-token prompt (echo's first token)


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

    def record(self, pos: int, ours, ref, device_token: int | None = None) -> None:
        """``ours``: the port's logits; ``device_token``: the token its on-device sampler chose
        greedily (top_k 1), which must be the reference's argmax unless the top two tie."""
        diff = float((ours - ref).abs().max())
        self.max_diff = max(self.max_diff, diff)
        self.positions += 1
        # A different argmax counts unless the reference itself had the two within tolerance
        # (random weights make near-ties; a flip inside the tolerance is not a disagreement).
        top = int(ours.argmax())
        bad = diff > TOLERANCE or float(ref.max() - ref[top]) > TOLERANCE
        if device_token is not None and float(ref.max() - ref[device_token]) > TOLERANCE:
            bad = True
            self.detail.append(f"position {pos}: the device sampler chose {device_token}, the reference's "
                               f"argmax is {int(ref.argmax())}")
        self.bad_positions += bad
        if bad and self.first_bad is None:
            self.first_bad = pos
            self.detail.append(f"position {pos}: max |diff| {diff:.3g}, argmax {int(ours.argmax())} vs "
                               f"{int(ref.argmax())}")


# -- the port, patched or not, in a directory of its own ---------------------------------------------
def stage_port(dest: Path, patched: bool, mutate: tuple[str, str] | None = None) -> Path:
    """The pinned port's files under ``dest``, patched as the image build patches them; ``mutate``
    (old line, new line) then changes one line of the result (the tests' proof that the check runs
    this file)."""
    src = dest / PORT_SUBDIR
    src.mkdir(parents=True)
    for f in PORT_FILES.glob("*.py"):
        shutil.copy2(f, src / f.name)
    if patched:
        # git apply, as the image build applies it (ami/scripts/neuron-port.sh)
        r = subprocess.run(["git", "apply", str(PATCH)], cwd=dest, capture_output=True, text=True)
        if r.returncode != 0:
            out = (r.stdout + r.stderr).strip().splitlines()
            raise PortCheckError(f"ami/neuron-port/{PATCH.name} does not apply to the pinned port: "
                                 f"{out[0] if out else 'patch exit ' + str(r.returncode)}")
    if mutate:
        path = src / "modeling_gemma4_e2b.py"
        lines = path.read_text().splitlines(keepends=True)
        hits = [i for i, line in enumerate(lines) if line.strip() == mutate[0].strip()]
        if len(hits) != 1:
            raise PortCheckError(f"--mutate: {mutate[0].strip()!r} is on {len(hits)} lines of the staged port, not one")
        indent = lines[hits[0]][: len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
        lines[hits[0]] = indent + mutate[1].strip() + "\n"
        path.write_text("".join(lines))
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
        # Each layer's output scale (a buffer, 1 at initialisation): the port reads it from the
        # checkpoint into a constant (_load_layer_scalar_values), so here each layer's differs from
        # 1 and from the others. Kept in [0.9, 1.3]: scales well below 1 compound over 35 layers
        # (0.7^35 = 4e-6) until this tiny model's residual stream (width 64, embeddings x 8) sinks
        # to RMSNorm's epsilon, where float32 and float64 part ways whatever the port does.
        for name, b in ref.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(torch.empty_like(b).uniform_(0.9, 1.3))
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
def load_port(port_src: Path, model_dir: Path, device_sampling: bool = False):
    """The NxDI application model of the port in ``port_src``, on CPU, built the way the engine
    builds it (a port imported before is dropped first: each variant imports its own file).

    The engine compiles with on-device sampling and ``output_logits`` (ami/neuron/neuron_config.py
    SAMPLING). NxD Inference 0.8's CPU mode cannot return both: its model wrapper unpacks a CPU
    call as ``logits, *kv_caches`` (models/model_wrapper.py l.1417-1419 at cd3abf3) and would take
    the logits for a KV layer. So the logits cases run with sampling on the host (logits back, the
    engine's other mode), and the device-sampling case with ``output_logits`` off (tokens back)."""
    import torch

    for path in (str(NXDI08), str(NXDI08 / "src")):
        if path not in sys.path:
            sys.path.insert(0, path)
    import neuron_stubs
    import nxd_world1

    nxd_world1.install()
    for name in ("modeling_gemma4_e2b", "ndxi_patch"):
        sys.modules.pop(name, None)
    neuron_stubs.STRICT["on"] = False  # the port's module-level decorators touch NKI stubs
    from ami.neuron import neuron_config as nc
    from ami.neuron.neuron_generator import construct_model

    cfg = nc.plan(json.loads((model_dir / "config.json").read_text()), neuron_cores=1, tp_degrees=(1,),
                  platform="inf2", shapes=nc.make_shapes(PROMPT_BUCKETS, TOTAL, SLOTS, TOKEN_BUCKETS),
                  sdk_version="0.8.0", model_name="tiny-e2b")
    # on_cpu: NxD Inference's own switch for its sampler on CPU (torch.topk and torch.rand_like for
    # nxd_topk and the device RNG; modules/generation/sampling.py); the rest of the model ignores it.
    sampling = {"output_logits": False} if device_sampling else {"on_device_sampling_config": None,
                                                                  "output_logits": False}
    model = construct_model(str(model_dir), cfg, str(port_src), "modeling_gemma4_e2b:NeuronGemma4E2BForCausalLM",
                            "modeling_gemma4_e2b:Gemma4E2BInferenceConfig", torch_dtype=torch.float32, on_cpu=True,
                            **sampling)
    sys.path.remove(str(port_src))
    # On a NeuronCore each layer's layer_scalar is baked into the graph at trace time from what the
    # port read out of the checkpoint at construction (the weight loaded later has no effect:
    # modeling_gemma4_e2b.py l.974-983); on CPU the loaded weight would hide a miss, so look here.
    # The submodels' configs are copies; what they read is what this path and function give.
    path = getattr(model.config, "_name_or_path", None)
    port = sys.modules["modeling_gemma4_e2b"]
    scalars = port._load_layer_scalar_values(path, model.config.num_hidden_layers) if path else None
    if scalars is None or all(v == 1.0 for v in scalars):
        raise PortCheckError("the port read no layer_scalar values from the checkpoint at construction: "
                             "its graphs would multiply every layer by 1.0")
    if not torch.distributed.is_initialized():
        # to_cpu's gloo group of one rendezvouses on MASTER_PORT (default 29500): a free port, so
        # two checks at once (parallel tests) do not collide
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    with warnings.catch_warnings():  # "CPU inference with continuous batching uses 2x memory"
        warnings.simplefilter("ignore", UserWarning)
        model.to_cpu()
    _cpu_mode_fixes(type(model))
    neuron_stubs.STRICT["on"] = True  # from here a Neuron-only stub reached at run time raises
    return model


def _cpu_mode_fixes(model_cls) -> None:
    """What a compiled graph has and NxD Inference 0.8's CPU mode does not."""
    from neuronx_distributed_inference.models.model_wrapper import ModelWrapper

    # A compiled graph is traced once per bucket with ``n_positions`` set to that bucket
    # (model_wrapper.py get_trace_callable l.1684-1686 at cd3abf3); the CPU mode builds one module
    # per wrapper at the full length. Give the module the bucket the wrapper padded this call to
    # (the attention mask's width), as the graph for that bucket would have it.
    if not getattr(ModelWrapper._forward, "at_bucket", False):
        traced = ModelWrapper._forward

        def forward_at_bucket(self, *args):
            self.model.n_positions = args[1].shape[-1]
            return traced(self, *args)

        forward_at_bucket.at_bucket = True
        ModelWrapper._forward = forward_at_bucket
    # The CPU path copies the KV cache back through _get_captured_tensors_offset (model_base.py
    # l.3827/3831 at cd3abf3), a method only NeuronBaseForImageToText defines
    # (image_to_text_model_base.py l.631): the same rule, read from the text model's config.
    # Neuron runs never take this branch (it is under ``not is_neuron()``).
    model_cls._get_captured_tensors_offset = lambda self: (
        self.neuron_config.tensor_capture_config.get_offset() if self.neuron_config.tensor_capture_config else 0)


@dataclass
class Sequence:
    slot: int
    prompt: list[int]
    tokens: list[int]  # the prompt and the reference's greedy continuation
    logits: object  # the reference's logits at every position of ``tokens``


def reference(ref, prompts: dict[int, list[int]], steps: int) -> list[Sequence]:
    """transformers' greedy continuation of each prompt and its logits at every position (one
    generate and one forward per sequence; the port is then teacher-forced with these tokens, so
    one slip does not hide the next)."""
    import torch

    out = []
    with torch.no_grad():
        for slot, p in prompts.items():
            ids = torch.tensor([p])
            if steps:
                ids = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps, min_new_tokens=steps,
                                   do_sample=False, pad_token_id=0, eos_token_id=None)
            out.append(Sequence(slot, p, ids[0].tolist(), ref(input_ids=ids).logits[0].double()))
    return out


@dataclass
class Workload:
    context: Sequence  # every prefix encoded
    short: Sequence  # every prefix encoded, shorter than the window
    one: list[Sequence]  # one sequence generating
    many: list[Sequence]  # four slots generating together


def workload(ref) -> Workload:
    import torch

    gen = torch.Generator().manual_seed(1)

    def prompt(n: int) -> list[int]:
        return torch.randint(3, SCALED["vocab_size"], (n,), generator=gen).tolist()

    return Workload(
        context=reference(ref, {0: prompt(CONTEXT_LEN)}, 0)[0],
        short=reference(ref, {1: prompt(WINDOW - 4)}, 0)[0],
        one=reference(ref, {0: prompt(ONE_PROMPT)}, DECODE_STEPS),
        many=reference(ref, dict(zip(SLOT_ORDER, (prompt(n) for n in SLOT_PROMPTS))), DECODE_STEPS),
    )


def run_variant(port_src: Path, model_dir: Path, work: Workload) -> list[Case]:
    from ami.neuron.nxdi_slots import NxDISlotRunner

    runner = NxDISlotRunner(load_port(port_src, model_dir), SLOTS, PROMPT_BUCKETS[-1])

    def every_prefix(case: Case, seq: Sequence, first: int) -> Case:
        for n in range(first, len(seq.tokens) + 1):
            case.record(n - 1, runner.prefill(seq.slot, seq.tokens[:n])[0], seq.logits[n - 1])
        runner.release(seq.slot)
        return case

    def generate(case: Case, seqs: list[Sequence]) -> Case:
        for s in seqs:
            case.record(len(s.prompt) - 1, runner.prefill(s.slot, s.prompt)[0], s.logits[len(s.prompt) - 1])
        by_slot = sorted(seqs, key=lambda s: s.slot)
        for step in range(DECODE_STEPS):
            out = runner.decode([s.slot for s in by_slot], [s.tokens[len(s.prompt) + step] for s in by_slot])
            for row, s in enumerate(by_slot):
                pos = len(s.prompt) + step
                case.record(pos, out[row], s.logits[pos])
        for s in seqs:
            runner.release(s.slot)
        return case

    return [
        # Global layers alone: every prompt inside the window, so the sliding layers see what the
        # global ones see, and no token generation: only the global layers' RoPE can differ.
        every_prefix(Case("global-layers", f"prompt shorter than the window ({WINDOW - 4} tokens), logits at "
                                           f"every position: the global layers' RoPE"), work.short, 2),
        every_prefix(Case("context", f"context encoding, every position of a {CONTEXT_LEN}-token prompt "
                                     f"({PROMPT_BUCKETS} buckets, window {WINDOW})"), work.context, 1),
        generate(Case("long-context", f"one sequence: {ONE_PROMPT}-token prompt, {DECODE_STEPS} greedy tokens (to "
                                      f"position {ONE_PROMPT + DECODE_STEPS - 1}, window {WINDOW})"), work.one),
        generate(Case("slots", f"{SLOTS} slots in slot order {SLOT_ORDER} with prompts of "
                               f"{'/'.join(map(str, SLOT_PROMPTS))} tokens, decoding together, {DECODE_STEPS} steps"),
                 work.many),
    ]


def device_sampling_case(port_src: Path, model_dir: Path, work: Workload) -> Case:
    """The engine's on-device sampling, through NxD Inference 0.8's own Sampler on CPU: two rows
    decoding together, one greedy (top_k 1: its tokens are the reference's argmax), one sampled
    with top_k 2 and temperature 1.5 (each of its tokens is one of the reference's two best), both
    teacher-forced with the reference's tokens."""
    from ami.neuron.nxdi_slots import NxDISlotRunner

    runner = NxDISlotRunner(load_port(port_src, model_dir, device_sampling=True), SLOTS, PROMPT_BUCKETS[-1])
    case = Case("device-sampling", f"NxDI's on-device sampler, per-row parameters: slot 0 greedy, slot 1 top_k 2 "
                                   f"at temperature 1.5, {DECODE_STEPS} steps past a {ONE_PROMPT}-token prompt")
    if not runner.device_sampling:
        case.first_bad = 0
        case.detail.append("the engine's NeuronConfig does not sample on the device")
        return case
    s = work.one[0]
    params = {0: (1, 1.0, 1.0), 1: (2, 1.0, 1.5)}
    sampled = 0
    for slot in (0, 1):
        out = runner.prefill(slot, s.prompt, sampling=[params[slot]], want_logits=[False])
        assert out.logits is None, "logits came back for a row that did not ask"
    for step in range(DECODE_STEPS):
        pos = len(s.prompt) + step
        out = runner.decode([0, 1], [s.tokens[pos]] * 2, sampling=[params[0], params[1]], want_logits=[False, False])
        ref = s.logits[pos]
        best2 = ref.topk(2).indices.tolist()
        greedy, drawn = int(out.tokens[0]), int(out.tokens[1])
        case.positions += 1
        sampled += drawn != best2[0]
        wrong = float(ref.max() - ref[greedy]) > TOLERANCE or drawn not in best2
        if wrong and case.first_bad is None:
            case.first_bad = pos
            case.detail.append(f"position {pos}: device tokens {greedy}, {drawn}; reference's best two {best2}")
        case.bad_positions += wrong
    if case.first_bad is None and not sampled:
        case.first_bad = len(s.prompt)
        case.detail.append("the sampled row never left the argmax: its parameters did not reach the sampler")
    return case


def run(variants: list[dict], workdir: Path) -> list[list[Case]]:
    """Each variant ({"patched": bool, "mutate": (old, new) or None}) against one reference."""
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    # Every port staged first: a patch that does not apply or a line not found is one line at once,
    # before the minute the reference and the runs take.
    ports = [stage_port(workdir / f"port{i}", v["patched"], v.get("mutate")) for i, v in enumerate(variants)]
    # The reference in float64: what is left of the difference is the port's own float32 rounding.
    ref = write_checkpoint(workdir / "ckpt").double()
    work = workload(ref)
    results = []
    for i, port_src in enumerate(ports):
        cases = run_variant(port_src, workdir / "ckpt", work)
        if i == 0:  # the first variant (the one asked for) also through the on-device sampler
            cases.append(device_sampling_case(port_src, workdir / "ckpt", work))
        results.append(cases)
    return results


def variants_for(setting: str, also_unpatched: bool, also_mutated: tuple[str, str] | None) -> list[dict]:
    """The ports to run, the one KIT_PORT_PATCH names first ("on": with the kit's patch, "off": as
    pinned); raises PortCheckError for another setting."""
    if setting not in ("on", "off"):
        raise PortCheckError(f"KIT_PORT_PATCH={setting!r}: must be 'on' (the port with the kit's patch) or "
                             "'off' (the port as pinned)")
    variants = [{"label": "patched" if setting == "on" else "unpatched", "patched": setting == "on"}]
    if also_unpatched and setting == "on":
        variants.append({"label": "unpatched", "patched": False})
    if also_mutated:
        variants.append({"label": "mutated", "patched": True, "mutate": tuple(also_mutated)})
    return variants


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.neuron.port_check", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--json-file", type=Path, metavar="PATH",
                    help="also write the figures as one JSON object to PATH (the text report still prints)")
    ap.add_argument("--also-unpatched", action="store_true",
                    help="also run the port as pinned, against the same reference (it must disagree)")
    ap.add_argument("--also-mutated", nargs=2, metavar=("LINE", "REPLACEMENT"),
                    help="also run the patched port with one line replaced (the tests' proof that the check "
                         "runs the port's file)")
    args = ap.parse_args(argv)
    try:
        variants = variants_for(os.environ.get("KIT_PORT_PATCH", "on"), args.also_unpatched, args.also_mutated)
        with tempfile.TemporaryDirectory(prefix="port-check-") as tmp:
            results = run(variants, Path(tmp))
    except PortCheckError as e:
        print(f"port-check: {e}", file=sys.stderr)
        return 2
    labels = {"patched": "the port with ami/neuron-port/gemma4-e2b-port.patch",
              "unpatched": "the port as pinned (no patch)", "mutated": "the patched port with one line changed"}
    figures = json.dumps({"tolerance": TOLERANCE, "variants": [
        {**v, "cases": [{**asdict(c), "ok": c.ok} for c in cases]} for v, cases in zip(variants, results)]})
    if args.json:
        print(figures)
    if args.json_file:
        args.json_file.write_text(figures + "\n")
    rc = 0
    for v, cases in zip(variants, results):
        label = labels[v["label"]]
        if not args.json:
            print(f"port-check: {label}, float32 on CPU vs transformers Gemma4ForCausalLM, tolerance {TOLERANCE}")
            for c in cases:
                first = "none" if c.first_bad is None else str(c.first_bad)
                print(f"  {'ok  ' if c.ok else 'FAIL'} {c.name:14s} max |logit diff| {c.max_diff:.3g} over "
                      f"{c.positions} positions ({c.bad_positions} differ), first differing position {first}: "
                      f"{c.what}")
        failed = [c.name for c in cases if not c.ok]
        if failed:
            print(f"port-check: {label} disagrees with transformers in: {', '.join(failed)}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
