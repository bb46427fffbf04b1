"""What upstream says about each Neuron SDK line, as recorded facts with their sources.

Plain data (no aws-cdk-lib, no Neuron SDK): kit/pins.py pins the lines the kit builds, and
tests/stacks/test_neuron_lines.py checks the pins against these rows and refuses a default line whose NxD
Inference does not support inf2 and trn1 (``check_default_line``). Every row names its source:
repository, path, tag or ref (with the commit it was read at), and a short quote. Nothing here was
run by the kit: nothing of the kit has run on inf2 or trn1 (README, "What has run where").

Repositories read (git snapshots):
- aws-neuron/aws-neuron-sdk: tags v2.28.0 (86a92868), v2.29.0 (4b730ec5), v2.30.0 (3afa0fdf),
  v2.31.0 (ee7d6e00), v2.31.1 (c19b2e69).
- aws-neuron/neuronx-distributed-inference: release commits cd3abf3 ("Neuron SDK Release 2.28.0",
  _version.py 0.8.0) and c63afe0 ("Release 2.29", 0.9.0); it has no tag after v0.7.14366 and no
  0.10 source (main 4bcdc54 is still 0.9.0). Gemma 4 ports: refs/pull/106/head = 7593d9c (31B),
  refs/pull/115/head = 699e33a (E2B; the kit pins its parent 6aa6121, kit/pins.py NXDI_COMMIT).
"""
from __future__ import annotations

from dataclasses import dataclass

SDK_REPO = "aws-neuron/aws-neuron-sdk"
NXDI_REPO = "aws-neuron/neuronx-distributed-inference"
MANIFEST = "src/helperscripts/n2-manifest.json"
WHATS_NEW = "about-neuron/whats-new.rst"
RELEASE_CONTENT = "release-notes/releasecontent.rst"
PORT_31B = "contrib/models/gemma-4-31b-it/README.md"
PORT_E2B = "contrib/models/gemma-4-E2B/README.md"


@dataclass(frozen=True)
class Source:
    repo: str
    path: str
    ref: str  # tag or ref, with the commit it was read at
    quote: str  # short, verbatim


@dataclass(frozen=True)
class SdkLine:
    line: str
    nxdi: str  # NxD Inference wheel version in the release
    neuronx_cc: str
    transformers: str  # what NxD Inference declares
    nxdi_platforms: tuple[str, ...]  # where upstream supports NxD Inference on this line
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class PortReport:
    port: str  # "#106 gemma-4-31b-it" | "#115 gemma-4-E2B"
    line: str
    platform: str
    status: str  # as the port's table says it
    source: Source


_MANIFEST_2311 = f"v2.31.1 (c19b2e69), {MANIFEST}"
_PLATFORMS_GONE = Source(SDK_REPO, WHATS_NEW, "v2.31.0 (ee7d6e00), 2.29 entry",
                         "NxD Inference no longer supports Trn1/Inf2. Only Trn2 and newer hardware is supported. "
                         "Pin to Neuron SDK 2.28 for Trn1/Inf2 support.")

SDK_LINES: dict[str, SdkLine] = {
    "2.28": SdkLine(
        "2.28", nxdi="0.8.16251", neuronx_cc="2.23.6484.0", transformers="==4.57.*",
        nxdi_platforms=("inf2", "trn1", "trn2"),
        sources=(
            Source(SDK_REPO, MANIFEST, "release 2.28.1 in " + _MANIFEST_2311,
                   '"neuronx_distributed_inference", "version": "0.8.16251", "supported_instances": '
                   '["inf2", "trn2", "trn1"]; "neuronx-cc", "version": "2.23.6484.0"'),
            Source(NXDI_REPO, "setup.py", "cd3abf3 (Neuron SDK Release 2.28.0 - Component Release)",
                   '"transformers==4.57.*"'),
            _PLATFORMS_GONE,
        )),
    "2.29": SdkLine(
        "2.29", nxdi="0.9.17334", neuronx_cc="2.24.5133.0", transformers="==4.57.*",
        nxdi_platforms=("trn2", "trn3"),
        sources=(
            Source(SDK_REPO, MANIFEST, "release 2.29.0 in " + _MANIFEST_2311,
                   '"neuronx_distributed_inference", "version": "0.9.17334"; "neuronx-cc", "version": "2.24.5133.0" '
                   '(2.29.1: 2.24.8799.0)'),
            Source(NXDI_REPO, "setup.py", "c63afe0 (Release 2.29)", '"transformers==4.57.*"'),
            _PLATFORMS_GONE,
            Source(SDK_REPO, "release-notes/components/nxd-inference.rst", "v2.31.0 (ee7d6e00), 0.9.17334",
                   "NxD Inference models are now only supported on Trn2 and newer hardware."),
        )),
    "2.30": SdkLine(
        "2.30", nxdi="0.10.17970", neuronx_cc="2.25.3371.0", transformers="==4.57.*",
        nxdi_platforms=("trn2", "trn3"),
        sources=(
            Source(SDK_REPO, MANIFEST, "release 2.30.0 in " + _MANIFEST_2311,
                   '"neuronx_distributed_inference", "version": "0.10.17970"; "neuronx-cc", "version": "2.25.3371.0"'),
            Source(SDK_REPO, RELEASE_CONTENT, "v2.30.0 (3afa0fdf)", "| neuronx-distributed-inference    | == 4.57.*"),
            _PLATFORMS_GONE,
        )),
    "2.31": SdkLine(
        "2.31", nxdi="0.10.18399", neuronx_cc="2.26.6360.0", transformers="==4.57.*",
        nxdi_platforms=("trn2", "trn3"),
        sources=(
            Source(SDK_REPO, MANIFEST, "release 2.31.0 in " + _MANIFEST_2311,
                   '"neuronx_distributed_inference", "version": "0.10.18399"; "neuronx-cc", "version": "2.26.6360.0"'),
            Source(SDK_REPO, RELEASE_CONTENT, "v2.31.1 (c19b2e69)", "| neuronx-distributed-inference    | == 4.57.*"),
            Source(SDK_REPO, WHATS_NEW, "v2.31.0 (ee7d6e00), 2.31 entry",
                   "NxD Inference no longer supports Trn1/Inf2. Pin to Neuron SDK 2.28 for continued support."),
        )),
}
# The manifest still lists inf2 and trn1 under "supported_instances" for NxD Inference 0.9 and 0.10;
# the release notes above say otherwise, and they are what nxdi_platforms records.

_M31 = Source(NXDI_REPO, PORT_31B, "refs/pull/106/head (7593d9c), Compatibility Matrix", "")
_ME2B = Source(NXDI_REPO, PORT_E2B, "refs/pull/115/head (699e33a), Compatibility Matrix", "")


def _r(port: str, line: str, platform: str, status: str, base: Source, quote: str) -> PortReport:
    return PortReport(port, line, platform, status, Source(base.repo, base.path, base.ref, quote))


P31, PE2B = "#106 gemma-4-31b-it", "#115 gemma-4-E2B"
PORT_REPORTS: tuple[PortReport, ...] = (
    _r(P31, "2.28", "inf2", "VALIDATED", _M31,
       "| inf2.48xlarge (TP=16, LNC=1) | Not supported (NxDI 0.10 drops Inf2) | Not supported | "
       "**VALIDATED** (text; see inf2 notes) |"),
    _r(P31, "2.29", "inf2", "Not supported", _M31, "inf2.48xlarge ... SDK 2.29: Not supported"),
    _r(P31, "2.31", "inf2", "Not supported", _M31, "Not supported (NxDI 0.10 drops Inf2)"),
    _r(P31, "2.28", "trn1", "Likely (untested)", _M31, "| trn1 | Not supported (NxDI 0.10 drops Trn1) | "
       "Not tested | Likely (untested) |"),
    _r(P31, "2.29", "trn1", "Not tested", _M31, "trn1 ... SDK 2.29: Not tested"),
    _r(P31, "2.31", "trn1", "Not supported", _M31, "Not supported (NxDI 0.10 drops Trn1)"),
    _r(P31, "2.28", "trn2", "VALIDATED", _M31, "trn2.3xlarge (TP=4, LNC=2) ... SDK 2.28: VALIDATED (text + VLM)"),
    _r(P31, "2.29", "trn2", "VALIDATED", _M31, "SDK 2.29: VALIDATED (text + VLM, seq_len up to 8192)"),
    _r(P31, "2.31", "trn2", "VALIDATED", _M31, "SDK 2.31: **VALIDATED** (text, seq_len up to 8192)"),
    _r(PE2B, "2.28", "trn2", "PASS (text)", _ME2B, "| Trn2 (text-only) | PASS | FAIL (NCC_INLA001) | PASS |"),
    _r(PE2B, "2.29", "trn2", "FAIL (NCC_INLA001)", _ME2B, "SDK 2.29/2.29.1: FAIL (NCC_INLA001)"),
    _r(PE2B, "2.30", "trn2", "PASS (text)", _ME2B, "SDK 2.30: PASS"),
)
# The settings of the one validated inf2 run (31B port, SDK 2.28), which the kit uses on inf2:
# "inf2: TP=16 with LNC=1 (`NEURON_LOGICAL_NC_CONFIG=1`) ... inf2 requires SDK 2.28 (NxDI 0.8) —
# NxDI 0.9+ (SDK 2.29+) drops Inf2/Trn1 support. The d256 SWA NKI kernel is automatically disabled
# on inf2 ... inf2 uses the decomposed attention path"; "`fused_qkv=False` required";
# "`attn_kernel_enabled=False` in NeuronConfig" (PORT_31B at refs/pull/106/head, 7593d9c, Notes).
INF2_SETTINGS = {"NEURON_LOGICAL_NC_CONFIG": "1", "attn_kernel_enabled": False, "fused_qkv": False}
INF2_SETTINGS_SOURCE = Source(NXDI_REPO, PORT_31B, "refs/pull/106/head (7593d9c), Notes",
                              "inf2: TP=16 with LNC=1 (`NEURON_LOGICAL_NC_CONFIG=1`)")

# Which transformers the Neuron image pins, and why (docs/images.md, "transformers on the image"):
# NxD Inference declares ==4.57.* on every line above; the 31B port ran NxD Inference 0.8 on SDK
# 2.28 with 4.57.6; 4.57 has SampleDecoderOnlyOutput and transformers.utils.fx, which NxD Inference
# imports and transformers 5 removed. What 4.57 lacks is Gemma 4 itself (no model_type "gemma4"):
# the engine reads config.json without AutoConfig (ami/neuron/nxdi_compat.py), as the E2B port's
# own VLM loader does. The engine's own code needs no transformers 5 on the Neuron image.
TRANSFORMERS_CHOICE = "4.57.6"
TRANSFORMERS_SOURCES = (
    Source(NXDI_REPO, PORT_31B, "refs/pull/106/head history, ac8934a (2026-04-04), Prerequisites",
           "Also works with **NxDI 0.8.0** on SDK 2.28 with transformers 4.57.6 (includes JSON config fallback)"),
    Source(NXDI_REPO, "contrib/models/gemma-4-E2B/src/modeling_gemma4_e2b_vlm.py", "6aa6121, load_pretrained_config",
           "Falls back to manual JSON loading if AutoConfig doesn't recognize the model_type (e.g. 'gemma4' "
           "on older transformers versions)."),
    Source(NXDI_REPO, "src/neuronx_distributed_inference/utils/hf_adapter.py", "cd3abf3",
           "from transformers.generation import GenerateDecoderOnlyOutput, SampleDecoderOnlyOutput"),
)


def nxdi_supports(line: str, platform: str) -> bool:
    return platform in SDK_LINES[line].nxdi_platforms


def check_default_line(line: str, platforms: tuple[str, ...] = ("inf2", "trn1")) -> None:
    """Refuse, in one line, a default whose NxD Inference upstream does not support on inf2 and trn1."""
    if line not in SDK_LINES:
        raise ValueError(f"Neuron SDK line {line!r} has no recorded facts (kit/neuron_facts.py); "
                         f"recorded: {', '.join(SDK_LINES)}")
    missing = [p for p in platforms if not nxdi_supports(line, p)]
    if missing:
        src = SDK_LINES[line].sources[-1]
        raise ValueError(f"Neuron SDK {line} cannot be the default for inf2/trn1: NxD Inference "
                         f"{SDK_LINES[line].nxdi} does not support {', '.join(missing)} "
                         f"({src.repo} {src.path} at {src.ref}: \"{src.quote}\")")


def reports(line: str, platform: str | None = None) -> list[PortReport]:
    return [r for r in PORT_REPORTS if r.line == line and (platform is None or r.platform == platform)]
