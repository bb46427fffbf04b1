"""lm-evaluation-harness as the engine for standard tasks (``--tasks gsm8k,ifeval,...``).

Installed for this stage only (requirements-accuracy.txt, ``lm_eval[api]==0.4.13``). Per leaf task
and backend:

- generative tasks (``output_type: generate_until``) go through chat completions: lm-eval's
  ``local-chat-completions`` model with ``apply_chat_template`` (lm_eval/models/openai_completions.py:
  it sends ``messages``, ``temperature``, ``seed``, ``stop``, ``max_tokens``; its
  ``loglikelihood`` raises NotImplementedError: a chat endpoint cannot score a continuation);
- log-likelihood tasks (``loglikelihood``, ``multiple_choice``, ``loglikelihood_rolling``) go
  through ``local-completions`` only when the backend serves ``/v1/completions`` with ``echo``
  (the same module's payload for them is ``{"prompt", "max_tokens": 1, "logprobs": 1,
  "echo": true}`` and it reads ``choices[].logprobs.token_logprobs``/``top_logprobs`` of the
  prompt); otherwise the task is reported as not run for that backend, with the reason.

Per-item records come from lm-eval's logged samples (``log_samples``: ``doc_id``, ``resps``,
``filtered_resps``, ``filter`` and one value per metric, lm_eval/evaluator.py): the item is right
when the task's first metric under its first filter is 1. They are written when lm-eval finishes
the task for a backend; lm-eval's request cache (``use_cache``, a SqliteDict committed per
answer: lm_eval/api/model.py CachingLM) lets ``--resume`` skip the requests already answered.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import logging
import math
import os
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.http_deadline import fetch
from kit.contracts.results import ACCURACY_ITEMS, BOS_NOT_CORRECTED, LOGLIK_TYPES
from kit.errors import KitError

REQUIREMENTS = "pip install -c constraints.txt -r requirements-accuracy.txt"


class TaskError(KitError, ValueError):
    """An unknown task, or lm-eval not installed: one line, exit 2."""


@dataclass
class TaskResult:
    keys: list[tuple[str, str, str]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"backend", "task", "reason"}
    incomplete: dict[str, str] = field(default_factory=dict)  # backend -> why
    via: dict[str, str] = field(default_factory=dict)  # backend -> how lm-eval reached it, when not directly


_MANAGERS: dict[tuple[tuple[str, ...], bool], Any] = {}


def _task_manager(task_paths: list[Path], tasks: list[str] | None = None):
    """lm-eval's TaskManager, built once. Its index of the built-in tasks scans ~14,700 YAMLs
    (~10 s of CPU), so when every task asked for is in --task-path only those are indexed."""
    paths = tuple(str(p) for p in task_paths)
    try:
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise TaskError(f"--tasks needs lm-evaluation-harness: {REQUIREMENTS}") from None
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    if paths:
        if (paths, False) not in _MANAGERS:
            _MANAGERS[(paths, False)] = TaskManager(include_path=list(paths), include_defaults=False)
        own = _MANAGERS[(paths, False)]
        if tasks is not None and all(t in own.all_tasks for t in tasks):
            return own
    if (paths, True) not in _MANAGERS:
        _MANAGERS[(paths, True)] = TaskManager(include_path=list(paths) or None)
    return _MANAGERS[(paths, True)]


def check_tasks(tasks: list[str], task_paths: list[Path]) -> None:
    for p in task_paths:
        if not p.is_dir():
            raise TaskError(f"--task-path {p}: no such directory")
    tm = _task_manager(task_paths, tasks)
    known = set(tm.all_tasks)
    for t in tasks:
        if t not in known:
            close = difflib.get_close_matches(t, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise TaskError(f"--tasks {t!r}: not an lm-eval task{hint} "
                            "(python -m lm_eval ls tasks lists them)")
    for t in tasks:  # its dataset too, before anything is asked (a missing one is one line)
        leaf_tasks(t, task_paths)


HUB_PROBE_S = 5.0  # how long the Hugging Face Hub gets to answer before only the cache is used
_TRUE = ("1", "ON", "YES", "TRUE")
_LEAVES: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}


def _hub_unreachable() -> str | None:
    """Why datasets must come from the local cache (None: the Hub answers). Offline already
    (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE), or the Hub (HF_ENDPOINT) gives no answer within
    HUB_PROBE_S: then datasets and huggingface_hub are switched to cached files only, so a
    dataset that is not cached fails at once instead of after a minute of retries."""
    if any(os.environ.get(k, "").upper() in _TRUE for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return "HF_HUB_OFFLINE is set"
    hub = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        fetch(hub + "/api/datasets?limit=1", deadline_s=HUB_PROBE_S, cap=1 << 20)  # any HTTP answer will do
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = f"{hub} did not answer within {HUB_PROBE_S:g} s ({getattr(e, 'reason', None) or e})"
    import datasets.config
    import huggingface_hub.constants

    # both libraries read these module attributes when they are about to go online
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    os.environ["HF_HUB_OFFLINE"] = "1"
    return why


def _dataset_of(tm: Any, task: str) -> str:
    """The Hugging Face dataset a task names in its YAML (``dataset_path``/``dataset_name``)."""
    entry = getattr(tm, "task_index", {}).get(task)
    cfg = getattr(entry, "cfg", None) or {}
    path, name = cfg.get("dataset_path"), cfg.get("dataset_name")
    return f"{path} ({name})" if path and name else str(path or "")


def leaf_tasks(task: str, task_paths: list[Path]) -> dict[str, str]:
    """leaf task name -> output type, for a task, group or tag name. Loads the task, and with it
    its dataset: one that cannot be had is a TaskError naming it and how to provide it."""
    key = (task, tuple(str(p) for p in task_paths))
    if key in _LEAVES:
        return _LEAVES[key]
    tm = _task_manager(task_paths, [task])
    offline = _hub_unreachable()
    try:
        loaded = tm.load([task])
    except Exception as e:  # noqa: BLE001 - datasets/lm-eval raise many types for a missing dataset
        dataset = _dataset_of(tm, task)
        where = os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise TaskError(
            f"--tasks {task}: the dataset{' ' + dataset if dataset else ''} could not be loaded "
            f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
            + (f"; {offline}, so only the local cache ({where}) was looked in" if offline else "")
            + "; download it once where huggingface.co is reachable (python -c \"import datasets; "
            f"datasets.load_dataset('{dataset.split(' ')[0] or '<path>'}'"
            + (f", '{dataset.split('(')[1].rstrip(')')}'" if "(" in dataset else "")
            + ")\") and run with HF_HOME pointing at that cache") from None
    _LEAVES[key] = {name: str(getattr(t, "OUTPUT_TYPE", None) or t.config.output_type)
                    for name, t in loaded["tasks"].items()}
    return _LEAVES[key]


# The echo probe's prompt. No spaces: the pieces a tokenizer cuts it into join back to it (a
# word-level tokenizer drops spaces, and a SentencePiece piece "▁2" decodes alone as "2").
PROBE_TEXT = "1,2,3"


@dataclass(frozen=True)
class Echo:
    """What POST /v1/completions with echo (the payload lm-eval sends for log-likelihoods) says
    about the probe's text prompt: how many tokens the server made of it, and those tokens."""
    count: int
    tokens: tuple[str, ...] | None  # None: not given as strings

    def prefix(self) -> str | None:
        """The token the server put before the text (e.g. ``<bos>``), "" when none, None when
        its echoed pieces do not say (then the token counts decide: ``completion_plan``)."""
        if self.tokens is None or "" in self.tokens:  # (a <bos> echoed as "" would join unseen)
            return None
        if "".join(self.tokens) == PROBE_TEXT:
            return ""
        if len(self.tokens) > 1 and "".join(self.tokens[1:]) == PROBE_TEXT:
            return self.tokens[0]
        return None


def echo_probe(base_url: str | None, model: str, timeout: float = 30.0, auth: str | None = None) -> Echo | None:
    """One echoed completion of PROBE_TEXT (``max_tokens`` 1, the prompt's logprobs), or None
    when the server does not return the prompt's token logprobs. (``timeout``: the probe's whole
    deadline, harness.http_deadline.) vLLM echoes the prompt's tokens then the generated one, each
    as ``tokenizer.decode(id)`` (vllm/entrypoints/openai/completion/serving.py
    ``request_output_to_completion_response`` and ``_create_completion_logprobs``), so a <bos> it
    put before the text is the first, as the kit's Neuron engine does (ami/neuron/api.py)."""
    if not base_url:
        return None
    body = json.dumps({"model": model, "prompt": PROBE_TEXT, "max_tokens": 1, "temperature": 0,
                       "logprobs": 1, "echo": True}).encode()
    try:
        status, raw = fetch(base_url.rstrip("/") + "/completions", deadline_s=timeout, data=body,
                            headers={"Content-Type": "application/json", **_auth(auth)})
        if status != 200:
            return None
        reply = json.loads(raw)
        lp = reply["choices"][0]["logprobs"]
        values, tokens = lp["token_logprobs"], lp.get("tokens")
        if not (isinstance(values, list) and len(values) >= 2):
            return None
        made = (reply.get("usage") or {}).get("completion_tokens")
        made = made if isinstance(made, int) and not isinstance(made, bool) and 1 <= made < len(values) else 1
        count = len(values) - made  # the prompt's entries come first, then the generated token
        ok = isinstance(tokens, list) and len(tokens) == len(values) and all(isinstance(t, str) for t in tokens)
        return Echo(count, tuple(tokens[:count]) if ok else None)
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError,
            RecursionError):
        return None


def serves_echo(base_url: str | None, model: str, timeout: float = 30.0, auth: str | None = None) -> bool:
    """Does POST /v1/completions with echo return the prompt's token logprobs? (``echo_probe``)"""
    return echo_probe(base_url, model, timeout, auth) is not None


def _auth(auth: str | None) -> dict[str, str]:
    return {"Authorization": auth} if auth else {}


def refused_chat_fields(base_url: str, model: str, seed: int, timeout: float = 60.0,
                        auth: str | None = None) -> str | None:
    """lm-eval's chat requests carry ``seed`` and ``stop`` (openai_completions.py
    LocalChatCompletion._create_payload). A server that refuses them with a 400 (the kit's Neuron
    engine: ami/neuron/api.py) is reached through the local gateway instead, which sends neither
    (the seed is dropped once refused: harness.accuracy.client.OpenAIAsk). Returns the server's
    refusal, or None when it accepts them (or answers anything but a 400)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1,
                       "temperature": 0, "seed": seed, "stop": ["\n\n"]}).encode()
    try:
        status, raw = fetch(base_url.rstrip("/") + "/chat/completions", deadline_s=timeout, data=body,
                            headers={"Content-Type": "application/json", **_auth(auth)})
    except (urllib.error.URLError, OSError, ValueError):
        return None
    detail = raw[:300].decode("utf-8", "replace")
    return detail if status == 400 and ("seed" in detail or "stop" in detail) else None


class _Reply:
    """What lm-eval's ``model_call`` reads of a ``requests`` response (api_models.py at 0.4.13:
    ``ok``, ``text``, ``raise_for_status()``, ``json()``)."""

    def __init__(self, url: str, status: int, body: bytes) -> None:
        self.url, self.status_code, self.content = url, status, body
        self.ok = 200 <= status < 400
        self.text = body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if not self.ok:
            import requests

            raise requests.HTTPError(f"{self.status_code} for {self.url}: {self.text[:200]}", response=self)


@contextlib.contextmanager
def deadline_posts(deadline_s: float):
    """lm-eval's one-request-at-a-time path (``num_concurrent`` 1: ``TemplateAPI.model_call``,
    api_models.py at 0.4.13) posts with ``requests``' ``timeout``, which bounds each socket read,
    not the request: a server dripping a byte every few seconds holds it for ever. While lm-eval
    runs, that module's ``requests`` is a stand-in whose ``post`` goes through
    harness.http_deadline.fetch, the stage's whole-request deadline. (Its concurrent path, aiohttp
    with a total ``ClientTimeout``, has one already.)"""
    import lm_eval.models.api_models as api

    real, dumps = api.requests, json.dumps  # (``json`` is post's own keyword below, as in requests)

    class _Requests:
        HTTPError = real.HTTPError

        @staticmethod
        def post(url: str, json: Any = None, headers: dict | None = None, **_: Any) -> _Reply:
            data = dumps(json).encode()
            status, body = fetch(url, deadline_s=deadline_s, data=data,
                                 headers={"Content-Type": "application/json", **(headers or {})})
            return _Reply(url, status, body)

    api.requests = _Requests
    try:
        yield
    finally:
        api.requests = real


def _chat_target(target: Any, kind: str, opts: dict[str, Any], res: TaskResult,
                 stack: contextlib.ExitStack) -> Any:
    """The target itself, or (chat, a server that refuses lm-eval's seed/stop) a local gateway."""
    if kind != "chat" or target.protocol != "openai" or not target.base_url:
        return target
    if target.chat_refusal is None:
        target.chat_refusal = refused_chat_fields(target.base_url, target.model_id, opts["settings"].seed,
                                                  auth=target.auth) or ""
    why = target.chat_refusal
    if not why:
        return target
    from harness.accuracy.gateway import openai_gateway

    res.via[target.name] = ("local gateway (no stop sequences, seed dropped if refused): the server "
                            f"refused lm-eval's request: {why[:200]}")
    return stack.enter_context(openai_gateway(target))


def _model_args(target: Any, kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    s = opts["settings"]
    common = {"model": target.model_id, "num_concurrent": opts["concurrency"], "max_retries": s.retries,
              "timeout": max(1, math.ceil(s.timeout)), "seed": s.seed, "max_gen_toks": s.max_tokens}
    if target.auth:  # lm-eval's TemplateAPI sends ``header`` instead of its Bearer api_key (api_models.py)
        common["header"] = {"Authorization": target.auth}
    if kind == "chat":
        return {**common, "base_url": target.base_url.rstrip("/") + "/chat/completions"}
    # Prompts go as text (tokenized_requests=False) unless the server puts <bos> before a text
    # prompt (completion_plan); the tokenizer counts the context's tokens, to find the
    # continuation's logprobs in the echoed prompt (api_models.py batch_loglikelihood_requests,
    # parse_logprobs). "auto": the server's /tokenize when it serves
    # /tokenizer_info and /tokenize, else the Hugging Face tokenizer of the model id
    # (openai_completions.py LocalCompletionsAPI).
    tok = {"tokenizer_backend": "huggingface", "tokenizer": opts["tokenizer"]} if opts.get("tokenizer") \
        else {"tokenizer_backend": "auto"}
    return {**common, "base_url": target.base_url.rstrip("/") + "/completions", "tokenized_requests": False, **tok}


class Unfit(ValueError):
    """lm-eval's tokenizer would not count a context's tokens as the server does: why, in a line."""


# lm-eval reads a continuation's log-likelihood as ``token_logprobs[ctxlen:-1]`` of the echoed
# prompt, ``ctxlen`` being the context's length by its own tokenizer, which adds no BOS
# (TemplateAPI ``add_bos_token=False`` by default, ``tok_encode``, ``batch_loglikelihood_requests``:
# lm_eval/models/api_models.py; ``LocalCompletionsAPI.parse_logprobs``: openai_completions.py, at
# 0.4.13). A server that puts <bos> before a text prompt (vLLM: ``add_special_tokens`` defaults
# to true for a completion prompt, vllm/entrypoints/openai/completion/protocol.py
# ``CompletionRequest``; the kit's Neuron engine as vLLM, ami/neuron/intake.py) moves every index
# by one: the slice starts one context token early and each log-likelihood gains that token's.
# There the prompts go as token ids (``tokenized_requests=True``: a token prompt is taken as it
# is, the same protocol.py's ``prompt: list[int] | list[list[int]]``) and lm-eval's contexts
# carry the <bos> themselves (``add_bos_token=True``: its tokenizer's special tokens), so the
# count is the server's. Rolling tasks must not: lm-eval puts ``prefix_token_id`` before the
# text itself (``TemplateAPI.loglikelihood_rolling``; lm_eval/utils.py
# ``get_rolling_token_windows``), so ``add_bos_token`` would send <bos><bos> and score the second;
# they go as token ids without it, the prefix being the server's first token
# (``custom_prefix_token_id``). A server that adds nothing keeps text prompts, as before.
def completion_plan(target: Any, names: list[str], leaves: dict[str, str],
                    opts: dict[str, Any]) -> tuple[list[tuple[str, list[str], dict[str, Any]]], str]:
    """How lm-eval's ``local-completions`` scores the log-likelihood leaves ``names`` on
    ``target`` (probed: ``target.echo``): [(cache name, leaves, model_args)], and what is sent,
    in words. Raises ``Unfit`` when lm-eval's tokenizer does not count the probe's text as the
    server does (another tokenizer: every context count would be off)."""
    from lm_eval.api.registry import get_model

    args = _model_args(target, "completions", opts)
    lm = get_model("local-completions").create_from_arg_obj(args)  # its tokenizer, as evaluate builds it
    plain = lm.tok_encode(PROBE_TEXT, add_special_tokens=False)
    special = lm.tok_encode(PROBE_TEXT, add_special_tokens=True)
    echo: Echo = target.echo
    prefix = echo.prefix()
    prepends = bool(prefix) if prefix is not None else echo.count == len(plain) + 1
    said = f"{PROBE_TEXT!r} is {echo.count} tokens for the server"
    which = f"--tokenizer {opts['tokenizer']}" if opts.get("tokenizer") else \
        f"the tokenizer lm-eval found for it ({getattr(lm, 'tokenizer_backend', None)})"
    if not prepends:
        if len(plain) != echo.count:
            raise Unfit(f"{said} and {len(plain)} for {which}: lm-eval would slice every context's "
                        "log-probabilities at the wrong token; pass --tokenizer with the served model's tokenizer")
        return [("completions", names, args)], "text (the server puts nothing before a text prompt)"
    bos = prefix or "a token"
    if len(special) != echo.count or special[1:] != plain:
        raise Unfit(f"{said}, {bos} first, and {len(special)} for {which} with its special tokens: lm-eval "
                    f"would not put {bos} before a context as the server does; pass --tokenizer with the "
                    "served model's tokenizer")
    rolling = [t for t in names if leaves.get(t) == "loglikelihood_rolling"]
    scored = [t for t in names if t not in rolling]
    ids = {**args, "tokenized_requests": True}
    plan = [("completions-ids", scored, {**ids, "add_bos_token": True})] if scored else []
    if rolling:
        plan.append(("rolling-ids", rolling, {**ids, "add_bos_token": False, "custom_prefix_token_id": special[0]}))
    return plan, (f"token ids, {bos} (id {special[0]}) first: the server puts {bos} before a text prompt")


def _is_right(value: Any) -> bool | None:
    """True/False for a 0/1 metric value (Python or numpy bool, int or float), else None."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return bool(v == 1.0) if v in (0.0, 1.0) else None


def records_from_samples(backend: str, model: str, samples: list[dict[str, Any]],
                         prefer_filter: str | None = None) -> tuple[list[dict[str, Any]], str, str]:
    """One record per doc from lm-eval's logged samples of one leaf task: under ``prefer_filter``
    when the task has it, else its first filter; the first metric. Raises ValueError when that
    metric is not right/wrong per item."""
    if not samples:
        return [], "", ""
    filters = list(dict.fromkeys(str(s["filter"]) for s in samples))
    filt = prefer_filter if prefer_filter in filters else filters[0]
    metric = samples[0]["metrics"][0]
    out = []
    for s in samples:
        if s["filter"] != filt:
            continue
        right = _is_right(s.get(metric))
        if right is None:
            raise ValueError(f"metric {metric} is not right/wrong per item ({s.get(metric)!r})")
        fr_all = s.get("filtered_resps") or []
        if fr_all and isinstance(fr_all[0], (list, tuple)):  # log-likelihood: one (ll, greedy) per choice
            lls = [float(x[0]) for x in fr_all]
            resp: Any = json.dumps(lls)
            fr: Any = max(range(len(lls)), key=lls.__getitem__)  # the choice it ranks first
        else:  # generative: the raw reply and what the task's filter extracted from it
            resp = s["resps"][0][0] if s.get("resps") and s["resps"][0] else None
            fr = fr_all[0] if fr_all else None
        out.append({"backend": backend, "model": model, "doc_id": s["doc_id"], "prompt_hash": s["prompt_hash"],
                    "response": resp if isinstance(resp, str) or resp is None else json.dumps(resp, default=str),
                    "extracted": fr if isinstance(fr, (str, int)) or fr is None else str(fr),
                    "correct": right, "answer": s.get("target") if isinstance(s.get("target"), (str, int))
                    else str(s.get("target"))})
    return out, filt, metric


def run_task(task: str, targets: list[Any], writer: Any, out_dir: Path, opts: dict[str, Any], *,
             echo: Callable[[str], None] = print, evaluate: Callable[..., Any] | None = None) -> TaskResult:
    """Run one --tasks entry (a task, group or tag) on every target."""
    from harness.accuracy.runner import finished

    res = TaskResult()
    leaves = leaf_tasks(task, opts["task_paths"])
    res.info = {"leaves": leaves, "engine": "lm-evaluation-harness"}
    tm = _task_manager(opts["task_paths"], [task])
    if evaluate is None:
        from lm_eval import simple_evaluate as evaluate
    keys_by_leaf: dict[str, dict[tuple[str, str, str], None]] = {}  # ordered sets: linear in the docs
    gen = [t for t, ty in leaves.items() if ty not in LOGLIK_TYPES]
    ll = [t for t, ty in leaves.items() if ty in LOGLIK_TYPES]
    for target in targets:
        done = finished(out_dir).get(target.name, {})
        stale = uncorrected(out_dir).get(target.name, set())  # scored before the BOS-offset fix: again
        runs: list[tuple[str, list[str]]] = []
        if gen:
            runs.append(("chat", gen))
        if ll:
            if target.completions_echo is None or (target.completions_echo and target.echo is None):
                target.echo = echo_probe(target.base_url, target.model_id, auth=target.auth)
                target.completions_echo = target.echo is not None
            if target.completions_echo:
                runs.append(("completions", ll))
            else:
                where = target.base_url if target.protocol == "openai" else f"the {target.protocol} API"
                for t in ll:
                    res.skipped.append({"backend": target.name, "task": t, "reason": (
                        f"{leaves[t]} task: needs /v1/completions with echo and prompt logprobs, "
                        f"which {where} does not serve")})
        for kind, names in runs:
            if not target.base_url:
                for t in names:
                    res.skipped.append({"backend": target.name, "task": t,
                                        "reason": "no OpenAI-compatible URL for lm-eval"})
                continue
            echo(f"accuracy   {target.name}: lm-eval {','.join(names)[:120]} via {kind} completions")
            samples: dict[str, Any] = {}
            ran: list[str] = []
            try:
                with contextlib.ExitStack() as stack:
                    direct = _chat_target(target, kind, opts, res, stack)
                    stack.enter_context(deadline_posts(opts["settings"].timeout))
                    if kind == "chat":
                        plan = [(kind, names, _model_args(direct, kind, opts))]
                    else:
                        try:
                            plan, how = completion_plan(direct, names, leaves, opts)
                        except Unfit as e:
                            res.skipped += [{"backend": target.name, "task": t, "reason": f"{leaves[t]} task: {e}"}
                                            for t in names]
                            continue
                        res.info.setdefault("log_likelihood_prompts", {})[target.name] = how
                    for cache_name, part, args in plan:
                        cache = out_dir / "lmeval-cache" / f"{target.name}-{cache_name}"
                        cache.parent.mkdir(parents=True, exist_ok=True)
                        out = evaluate(model="local-chat-completions" if kind == "chat" else "local-completions",
                                       model_args=args, tasks=part, limit=opts["limit"],
                                       log_samples=True, apply_chat_template=kind == "chat",
                                       gen_kwargs={"temperature": 0}, use_cache=str(cache), task_manager=tm,
                                       bootstrap_iters=0)
                        samples.update((out or {}).get("samples", {}))
                        ran += part
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - the backend failed mid-task: recorded, others go on
                why = f"lm-eval stopped: {type(exc).__name__}: {str(exc)[:300]}"
                res.incomplete[target.name] = why
                echo(f"accuracy   {target.name}: {why}")
            for leaf in ran:  # the leaves lm-eval finished (a later part may have stopped)
                try:
                    recs, filt, metric = records_from_samples(target.name, target.model_id,
                                                              samples.get(leaf, []), opts.get("filter"))
                except ValueError as e:
                    res.skipped.append({"backend": target.name, "task": leaf, "reason": str(e)})
                    continue
                res.info.setdefault("scoring", {})[leaf] = f"{metric} under filter {filt}" if metric else ""
                keys = keys_by_leaf.setdefault(leaf, {})
                for r in recs:
                    key = (leaf, str(r["doc_id"]), str(r["prompt_hash"]))
                    keys[key] = None
                    if done.get(key) is None or key in stale:
                        writer.write({"backend": r["backend"], "model": r["model"], "task": leaf,
                                      "id": str(r["doc_id"]), "prompt_hash": str(r["prompt_hash"]),
                                      "response": r["response"], "extracted": r["extracted"],
                                      "correct": r["correct"], "answer": r["answer"]})
    for leaf in leaves:
        res.keys += sorted(keys_by_leaf.get(leaf, {}), key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0, k[1]))
    return res


def uncorrected(out_dir: Path) -> dict[str, set[tuple[str, str, str]]]:
    """backend -> the (task, id, prompt_hash) whose answer (the last scored record, as
    runner.finished reads them) is an lm-eval log-likelihood from before the BOS-offset fix
    (kit/contracts/results.py: an items.jsonl record of version 1 or 0 is read so marked)."""
    from harness.accuracy.runner import ITEMS_FILE
    from harness.results import read_records

    last: dict[str, dict[tuple[str, str, str], bool]] = {}
    for rec in read_records(out_dir / ITEMS_FILE, ACCURACY_ITEMS):
        if isinstance(rec.get("correct"), bool):
            last.setdefault(str(rec.get("backend")), {})[
                (str(rec.get("task")), str(rec.get("id")), str(rec.get("prompt_hash")))] = \
                rec.get("bos_offset") == BOS_NOT_CORRECTED
    return {b: {k for k, old in keys.items() if old} for b, keys in last.items() if any(keys.values())}


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
