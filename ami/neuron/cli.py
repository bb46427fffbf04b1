"""Command line of ``python -m ami.neuron.server``: parse, check, build the generator.

Every check happens before torch or the Neuron SDK is imported; a bad value ends the process
with one line naming it and exit status 2.
"""
from __future__ import annotations

import argparse
import os
import sys

from .generator import Limits
from .neuron_config import DEFAULT_CACHE_ROOT, DEFAULT_SHAPES, ConfigError, make_shapes

PROG = "python -m ami.neuron.server"
DEFAULT_MODEL_SRC = "/opt/ami/nxdi-gemma4/src"
DEFAULT_MODEL_CLASS = "modeling_gemma4_e2b:NeuronGemma4E2BForCausalLM"
DEFAULT_CONFIG_CLASS = "modeling_gemma4_e2b:Gemma4E2BInferenceConfig"
# A connection sending no complete request head in time is closed; the same timer closes a
# connection idle between requests. Clients already cope with shorter: vLLM's API server closes
# idle connections after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default "5" in vllm/envs.py, passed
# to uvicorn's timeout_keep_alive).
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0  # a body not fully received in time is a 408
# Requests waiting for a slot: the harness benchmark's highest level (64 streams) fits beside a
# batch of 4; a deeper queue would only turn waiting into client timeouts.
DEFAULT_MAX_QUEUE = 64


# kit/cli.py OneLineParser's own copy: the engine imports nothing of the kit (test_import_graph.py)
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{PROG}: error: {message}\n")


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    return values


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1..65535, got {text!r}")
    return port


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"expected milliseconds in 0..10000, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected seconds in 0.1..3600, got {text!r}")
    return value


def _ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 60_000:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected milliseconds in 0..60000, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    d = DEFAULT_SHAPES
    p = _Parser(prog=PROG, description="OpenAI-compatible server of the kit's Neuron engine.")
    p.add_argument("--device", required=True, choices=["neuron", "cpu", "simulated"],
                   help="neuron: compiled model on NeuronCores; cpu: transformers (tests, demos); "
                        "simulated: a paced stand-in for the device at Gemma 4's vocabulary, no weights "
                        "(measures the host path: make bench-engine)")
    p.add_argument("--step-ms", type=_ms, default=6.0, metavar="MS",
                   help="simulated: device time of one decode step (default 6, E2B's bandwidth ceiling at TP 2 on inf2)")
    p.add_argument("--prefill-ms", type=_ms, default=40.0, metavar="MS",
                   help="simulated: device time of one prefill (default 40)")
    p.add_argument("--sampling", choices=["device", "host"], default="device",
                   help="simulated: sample on the device (token ids back) or on the host (logits back)")
    p.add_argument("--model", metavar="DIR", help="checkpoint directory (config.json, weights, tokenizer)")
    p.add_argument("--tiny-random", action="store_true",
                   help="cpu generator only: a tiny random-weight Gemma 4 built in memory")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="model id clients must send (default: the --model value, or tiny-random-gemma4)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    p.add_argument("--prompt-buckets", type=_ints, default=list(d.prompt_buckets), metavar="N,N,..",
                   help=f"prompt lengths compiled for; the largest is the prompt limit "
                        f"(default {','.join(map(str, d.prompt_buckets))})")
    p.add_argument("--max-total-tokens", type=_positive, default=d.total_tokens, metavar="N",
                   help=f"prompt + generated tokens per sequence (default {d.total_tokens})")
    p.add_argument("--token-buckets", type=_ints, metavar="N,N,..",
                   help="KV lengths of the token-generation graphs, ending at --max-total-tokens "
                        f"(default {','.join(map(str, d.token_buckets))} for the default total)")
    p.add_argument("--batch-size", type=_positive, default=d.batch_size, metavar="N",
                   help=f"sequences decoded together; more requests queue (default {d.batch_size})")
    p.add_argument("--batch-wait-ms", type=_nonneg_float, default=5.0, metavar="MS",
                   help="how long an idle engine waits for more requests before its first step (default 5)")
    p.add_argument("--max-queue", type=_positive, default=DEFAULT_MAX_QUEUE, metavar="N",
                   help=f"requests waiting for a free slot at most; beyond, 429 with Retry-After "
                        f"(default {DEFAULT_MAX_QUEUE})")
    p.add_argument("--dtype", default="bf16",
                   help="weight dtype: bf16 (default) or fp16 (cpu with --model also fp32); int4 is refused")
    p.add_argument("--tp-degree", type=_positive, metavar="N",
                   help="neuron: tensor-parallel degree (default: the largest of --tp-degrees that fits)")
    p.add_argument("--tp-degrees", type=_ints, metavar="N,N,..",
                   help="neuron: degrees the Neuron runtime supports on this instance (kit-boot passes the "
                        "catalog's); the largest that fits the NeuronCores and divides the heads is served")
    p.add_argument("--platform", metavar="NAME",
                   help="neuron: Neuron platform the graphs are compiled for (inf2, trn1; kit-boot passes the "
                        "catalog's), part of the compiled-cache key")
    p.add_argument("--compiled-dir", default=DEFAULT_CACHE_ROOT, metavar="DIR",
                   help=f"neuron: root of the compiled-model cache (default {DEFAULT_CACHE_ROOT})")
    p.add_argument("--neuron-model-src", default=DEFAULT_MODEL_SRC, metavar="DIR",
                   help=f"neuron: directory of the NxDI Gemma 4 port's sources (default {DEFAULT_MODEL_SRC})")
    p.add_argument("--neuron-model-class", default=DEFAULT_MODEL_CLASS, metavar="MODULE:CLASS",
                   help=f"neuron: model class (default {DEFAULT_MODEL_CLASS})")
    p.add_argument("--neuron-config-class", default=DEFAULT_CONFIG_CLASS, metavar="MODULE:CLASS",
                   help=f"neuron: inference config class (default {DEFAULT_CONFIG_CLASS})")
    p.add_argument("--compile-only", action="store_true",
                   help="neuron: compile into the cache (if not there yet) and exit, e.g. while baking an image")
    p.add_argument("--cpu-threads", type=_positive, metavar="N",
                   help="cpu: torch threads (default half the cores, at most 4: the rest serve HTTP and the "
                        "client; on 2 shared cores 2 threads made decode steps swing from 3 to 52 ms, 1 is steady)")
    p.add_argument("--header-timeout", type=_seconds, default=DEFAULT_HEADER_TIMEOUT_S, metavar="S",
                   help="close a connection that sends no complete request head within S seconds, "
                        "or stays idle that long between requests (default 10)")
    p.add_argument("--body-timeout", type=_seconds, default=DEFAULT_BODY_TIMEOUT_S, metavar="S",
                   help="answer 408 to a request whose body is not received within S seconds (default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if a.tiny_random and a.device != "cpu":
        p.error("--tiny-random needs --device cpu (a random model is never compiled for Neuron)")
    if a.compile_only and a.device != "neuron":
        p.error("--compile-only needs --device neuron (the cpu generator compiles nothing)")
    if a.tiny_random and a.model:
        p.error("give either --model DIR or --tiny-random, not both")
    if a.device == "simulated":
        if a.model:
            p.error("--device simulated has no weights: leave out --model")
    elif not a.tiny_random:
        if not a.model:
            p.error(f"--model DIR is required with --device {a.device}" +
                    (" (or --tiny-random)" if a.device == "cpu" else ""))
        if not os.path.isfile(os.path.join(a.model, "config.json")):
            p.error(f"--model {a.model!r} is not a checkpoint directory (no config.json in it)")
    try:
        a.shapes = make_shapes(a.prompt_buckets, a.max_total_tokens, a.batch_size, a.token_buckets)
        if a.device == "neuron":
            from .neuron_config import check_precision
            check_precision({}, a.dtype)
        elif a.dtype not in ("bf16", "fp16", "fp32"):
            p.error(f"--dtype {a.dtype!r} is not one of bf16, fp16, fp32 for the cpu generator")
    except ConfigError as exc:
        p.error(str(exc))
    a.served_model_name = a.served_model_name or (
        a.model if a.model else "simulated-gemma4" if a.device == "simulated" else "tiny-random-gemma4")
    return a


def compile_only(args: argparse.Namespace) -> str:
    """Compile for the configured shapes into the cache and return its directory."""
    from . import neuron_generator
    try:
        cfg = neuron_generator.engine_config(args.model, args.shapes, args.dtype, args.tp_degree,
                                           args.compiled_dir, args.served_model_name,
                                           args.tp_degrees or (), args.platform)
        neuron_generator.build_model(args.model, cfg, args.neuron_model_src, args.neuron_model_class,
                                   args.neuron_config_class, load=False)
    except ConfigError as exc:
        sys.exit(f"{PROG}: error: {exc}")
    return cfg.compiled_dir


def build_generator(args: argparse.Namespace):
    shapes = args.shapes
    limits = Limits(shapes.max_prompt_tokens, shapes.total_tokens, shapes.batch_size)
    wait_s = args.batch_wait_ms / 1000.0
    if args.device == "simulated":
        from . import simulated
        return simulated.make_generator(args.served_model_name, limits, wait_s, args.step_ms, args.prefill_ms,
                                        args.sampling, args.max_queue)
    if args.device == "cpu":
        from . import cpu_generator
        return cpu_generator.make_generator(args.served_model_name, args.model, args.tiny_random,
                                          limits, wait_s, args.cpu_threads, args.dtype, args.max_queue)
    from . import neuron_generator
    try:
        cfg = neuron_generator.engine_config(args.model, shapes, args.dtype, args.tp_degree,
                                           args.compiled_dir, args.served_model_name,
                                           args.tp_degrees or (), args.platform)
        return neuron_generator.make_generator(args.served_model_name, args.model, cfg, limits, wait_s,
                                             args.neuron_model_src, args.neuron_model_class,
                                             args.neuron_config_class, args.max_queue)
    except ConfigError as exc:
        sys.exit(f"{PROG}: error: {exc}")
