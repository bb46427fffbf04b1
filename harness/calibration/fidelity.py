"""Fidelity and capacity of the load benchmark, side by side with GuideLLM, against the truth.

    python -m harness.calibration.fidelity [--skip-guidellm] [--markdown FILE]

The reference server (``harness.calibration.refserver``) runs on core 1 and records what it really
sent (receipt time, send time and token count of every chunk); each client runs on core 0
(``taskset``). Both clients measure the same scenario at concurrency 1, 16 and 64, once with
usage as vLLM sends it and once with no usage at all (then both get the same locally built
WordLevel tokenizer). Then capacity: fast pacing at 64 streams, where the client's own CPU
decides how much it can measure.

Truth, per request: TTFT = first token chunk sent − request received; per-token ITL = gap
between token chunks / tokens in the later chunk; output tok/s = tokens sent / (last chunk −
first receipt). Client errors: per request, matched by request id (ours: X-Request-Id; GuideLLM:
response id ``cmpl-N``), TTFT error = client TTFT − true TTFT (median and p99 over requests);
ITL and tok/s as relative error of the level's mean.

GuideLLM 0.8.1 is installed on first use into ``.venv-guidellm`` (torch 2.13.0 CPU first so pip
does not fetch the CUDA build). Nothing here is a test: it prints numbers.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench import store
from harness.bench.metrics import percentile, ttft_ms
from harness.calibration.refserver import VOCAB, RefServerProcess
from kit.cli import OneLineParser, one_line_errors

REPO = Path(__file__).resolve().parents[2]
GUIDELLM_VENV = REPO / ".venv-guidellm"
SCENARIO = {"ttft_ms": 120.0, "itl_ms": 10.0, "tokens_per_chunk": 2, "output_tokens": 64,
            "role_chunk": True}
REQUESTS = {1: 12, 16: 64, 64: 256}  # measured, after one warm-up request per stream
CAPACITY = {"ttft_ms": 5.0, "itl_ms": 1.0, "output_tokens": 500, "role_chunk": True}


NICE = 0  # --nice: priority of server and clients against whatever else the machine runs


def pin(core: int) -> list[str]:
    cmd = ["taskset", "-c", str(core)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    return cmd + (["nice", "-n", str(NICE)] if NICE else [])


# -- GuideLLM -------------------------------------------------------------------------------------
def ensure_guidellm() -> Path:
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    if exe.exists():
        return exe
    print("installing GuideLLM 0.8.1 into .venv-guidellm (torch CPU first) …", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(GUIDELLM_VENV)], check=True)
    pip = [str(GUIDELLM_VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)
    subprocess.run(pip + ["guidellm==0.8.1"], check=True)
    return exe


def build_tokenizer(directory: Path) -> Path:
    """A WordLevel tokenizer over the server's output words and the prompt words: exactly one
    token per word, readable by our client (tokenizers) and by GuideLLM (transformers)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from harness.bench.profiles import WORDS, _PREFIX
    vocab: dict[str, int] = {"[UNK]": 0}
    for w in [*VOCAB, *WORDS, *_PREFIX.split()]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
         "model_max_length": 1_000_000}))
    return directory


# -- the reference server -------------------------------------------------------------------------
def start_server() -> RefServerProcess:
    try:
        return RefServerProcess(prefix=pin(1), cwd=str(REPO))
    except RuntimeError as e:
        raise SystemExit(str(e)) from None


def truth(records: list[dict], keep: set[str] | None = None) -> dict[str, Any]:
    """The server's record, limited to the requests in ``keep`` (ids or ``cmpl-N``) if given."""
    ttft, itl, tokens = {}, [], 0
    first_recv, last_sent = None, None
    for r in records:
        ns, ks = r["chunk_ns"], r["chunk_tokens"]
        if not ns or (keep is not None and r["id"] not in keep and f"cmpl-{r['n']}" not in keep):
            continue
        ttft[r["id"]] = (ns[0] - r["t_recv_ns"]) / 1e6
        ttft[f"cmpl-{r['n']}"] = ttft[r["id"]]
        for i in range(1, len(ns)):
            itl.extend([(ns[i] - ns[i - 1]) / 1e6 / ks[i]] * ks[i])
        tokens += sum(ks)
        first_recv = r["t_recv_ns"] if first_recv is None else min(first_recv, r["t_recv_ns"])
        last_sent = ns[-1] if last_sent is None else max(last_sent, ns[-1])
    window = (last_sent - first_recv) / 1e9 if first_recv is not None and last_sent else 0
    return {"ttft": ttft, "itl_mean": statistics.fmean(itl) if itl else None,
            "tok_s": tokens / window if window else None, "n": len(records),
            "ttft_p50": _pct(list(ttft.values()), 50), "ttft_p99": _pct(list(ttft.values()), 99)}


def _pct(vals: list[float], p: float) -> float | None:
    v = sorted(vals)
    return percentile(v, p) if v else None


# -- the two clients ------------------------------------------------------------------------------
def run_ours(url: str, c: int, n: int, out: Path, tokenizer: Path | None, profile: str) -> dict:
    cmd = pin(0) + [sys.executable, "-m", "harness.bench", "--base-url", url, "--model", "ref-model",
                    "--concurrency", str(c), "--requests", str(n),
                    "--profile", profile, "--out", str(out), "--quiet", "--timeout", "60"]
    if tokenizer:
        cmd += ["--tokenizer", str(tokenizer)]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    level = store.levels_of(json.loads((out / "summary.json").read_text()))[0]
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    return {"level": level, "ttft": {r["id"]: ttft_ms(r) for r in recs if r["ok"] and not r["warmup"]},
            "keep": {r["id"] for r in recs if not r["warmup"]},
            "itl_mean": level["itl_ms"]["mean"], "tok_s": level["output_tok_s"],
            "failed": level["failed"], "cpu_us_chunk": level.get("client_cpu_us_per_chunk")}


def run_guidellm(exe: Path, url: str, c: int, n: int, out: Path, tokdir: Path, out_tokens: int) -> dict:
    profile = "kind=synchronous" if c == 1 else f"kind=concurrent,streams={c}"
    cmd = pin(0) + [str(exe), "run", "--backend", f"kind=openai_http,target={url},model=ref-model",
                    "--profile", profile,
                    "--data", f"kind=synthetic_text,prompt_tokens=20,output_tokens={out_tokens}",
                    "--tokenizer", f"kind=huggingface_auto,model={tokdir}",
                    "--constraint", f"kind=max_requests,count={n + c}",
                    "--output", f"kind=json,path={out}", "--disable-console"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GUIDELLM__MAX_WORKER_PROCESSES": "2"}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env=env, cwd=out.parent, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b = json.loads(out.read_text())["benchmarks"][0]
    ok = b["requests"]["successful"]
    m = b["metrics"]
    chunks = sum(r["info"]["timings"].get("token_iterations") or 0 for r in ok)
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    # the same warm-up as ours for the TTFT comparison: drop the first request of each stream
    later = sorted(ok, key=lambda r: r["request_start_time"])[c:]
    return {"ttft": {r["response_id"]: r["time_to_first_token_ms"] for r in later},
            "keep": None,  # its ITL and tok/s cover all of its requests
            "itl_mean": m["inter_token_latency_ms"]["successful"]["mean"],
            "tok_s": m["output_tokens_per_second"]["successful"]["mean"],
            "failed": len(b["requests"]["errored"]) + len(b["requests"]["incomplete"]),
            "cpu_us_chunk": cpu / chunks * 1e6 if chunks else None}


def errors(client: dict, t: dict) -> dict[str, Any]:
    diffs = [v - t["ttft"][k] for k, v in client["ttft"].items() if k in t["ttft"] and v is not None]
    return {"ttft_err_p50": _pct(diffs, 50), "ttft_err_p99": _pct(diffs, 99), "matched": len(diffs),
            "itl_err_pct": (client["itl_mean"] / t["itl_mean"] - 1) * 100
            if client["itl_mean"] and t["itl_mean"] else None,
            "tok_s_err_pct": (client["tok_s"] / t["tok_s"] - 1) * 100
            if client["tok_s"] and t["tok_s"] else None}


# -- the table ------------------------------------------------------------------------------------
def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat (0, 0 elsewhere)."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f) - idle, sum(f)


def fmt(v: Any, spec: str = "+.2f") -> str:
    return "n/a" if v is None else format(v, spec)


@one_line_errors("python -m harness.calibration.fidelity")
def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m harness.calibration.fidelity", description=__doc__.split("\n")[0])
    ap.add_argument("--skip-guidellm", action="store_true", help="measure only our client")
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    ap.add_argument("--nice", type=int, default=0,
                    help="run server and clients at this nice level (negative needs root): on a "
                         "shared machine, keeps other work from preempting the measurement")
    args = ap.parse_args(argv)
    global NICE
    NICE = args.nice
    t_start = time.time()
    load0 = os.getloadavg()
    busy0, total0 = cpu_ticks()
    ours0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    exe = None if args.skip_guidellm else ensure_guidellm()
    work = Path(tempfile.mkdtemp(prefix="bench-fidelity-"))
    tokdir = build_tokenizer(work / "tokenizer")
    server = start_server()
    rows: list[str] = []
    cap_rows: list[str] = []
    try:
        for usage in ("vllm", "none"):
            for c in (1, 16, 64):
                n = REQUESTS[c]
                res: dict[str, dict] = {}
                tools = [("ours", None)] + ([("guidellm", exe)] if exe else [])
                for tool, gexe in tools:
                    server.configure(**SCENARIO, usage=usage, fault="none", fault_every=0)
                    out = work / f"{tool}-{usage}-c{c}"
                    if tool == "ours":
                        client = run_ours(server.url, c, n, out, tokdir if usage == "none" else None,
                                          f"20-{SCENARIO['output_tokens']}")
                    else:
                        out.mkdir(parents=True)
                        client = run_guidellm(gexe, server.url, c, n, out / "g.json", tokdir,
                                              SCENARIO["output_tokens"])
                    recs = server.records()
                    t = truth(recs, client["keep"])
                    res[tool] = {**errors(client, t), "failed": client["failed"],
                                 "truth_ttft_p50": t["ttft_p50"], "truth_itl": t["itl_mean"],
                                 "truth_tok_s": t["tok_s"], "tok_s": client["tok_s"]}
                o, g = res["ours"], res.get("guidellm", {})
                rows.append(
                    f"| {'vLLM-style' if usage == 'vllm' else 'none'} | {c} | {n} "
                    f"| {fmt(o['truth_ttft_p50'], '.1f')} / {fmt(o['truth_itl'], '.3f')} / {fmt(o['truth_tok_s'], '.0f')} "
                    f"| {fmt(o['ttft_err_p50'])} / {fmt(o['ttft_err_p99'])} | {fmt(o['itl_err_pct'])} | {fmt(o['tok_s_err_pct'])} "
                    f"| {fmt(g.get('ttft_err_p50'))} / {fmt(g.get('ttft_err_p99'))} | {fmt(g.get('itl_err_pct'))} "
                    f"| {fmt(g.get('tok_s_err_pct'))} |")
                print(rows[-1], flush=True)
        for tpc in (2, 1):
            res = {}
            for tool, gexe in [("ours", None)] + ([("guidellm", exe)] if exe and tpc == 2 else []):
                server.configure(**CAPACITY, tokens_per_chunk=tpc, usage="vllm", fault="none", fault_every=0)
                out = work / f"cap-{tool}-{tpc}"
                if tool == "ours":
                    client = run_ours(server.url, 64, 256, out, None, f"20-{CAPACITY['output_tokens']}")
                else:
                    out.mkdir(parents=True)
                    client = run_guidellm(gexe, server.url, 64, 256, out / "g.json", tokdir,
                                          CAPACITY["output_tokens"])
                t = truth(server.records(), client["keep"])
                res[tool] = {**errors(client, t), "tok_s": client["tok_s"], "truth": t["tok_s"],
                             "cpu": client["cpu_us_chunk"]}
            for tool, r in res.items():
                cap_rows.append(f"| {tool} | {tpc} | {fmt(r['truth'], ',.0f')} | {fmt(r['tok_s'], ',.0f')} "
                                f"| {fmt(r['tok_s_err_pct'])} | {fmt(r['cpu'], '.1f')}"
                                f"{' (incl. start-up)' if tool == 'guidellm' else ''} |")
                print(cap_rows[-1], flush=True)
    finally:
        server.stop()
    load1 = os.getloadavg()
    busy1, total1 = cpu_ticks()
    ours1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.time() - t_start
    ncpu = os.cpu_count() or 1
    busy_pct = 100.0 * (busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan")
    ours_pct = 100.0 * (ours1.ru_utime - ours0.ru_utime + ours1.ru_stime - ours0.ru_stime) / (wall * ncpu)
    header = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))} with "
        f"`python -m harness.calibration.fidelity{f' --nice {NICE}' if NICE else ''}`; server on core 1, clients on core 0; "
        f"{ncpu} cores busy {busy_pct:.0f}% of the time, {ours_pct:.0f}% by this script's processes and "
        f"{busy_pct - ours_pct:.0f}% by everything else; load average {load0[0]:.2f} at start, "
        f"{load1[0]:.2f} at end; took {wall:.0f} s.\n\n"
        f"Scenario: TTFT {SCENARIO['ttft_ms']:g} ms, {SCENARIO['itl_ms']:g} ms per token, "
        f"{SCENARIO['tokens_per_chunk']} tokens per chunk, {SCENARIO['output_tokens']} tokens, "
        "role-only first chunk. Truth = the server's record. TTFT error = client − truth per "
        "request (median / p99, ms); ITL and tok/s: relative error of the mean (%).\n\n"
        "| usage | streams | requests | truth TTFT p50 ms / ITL ms / tok/s | ours TTFT err p50 / p99 | ours ITL err % "
        "| ours tok/s err % | GuideLLM TTFT err p50 / p99 | GuideLLM ITL err % | GuideLLM tok/s err % |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    cap_header = (
        f"\nCapacity: 64 streams, TTFT {CAPACITY['ttft_ms']:g} ms, {CAPACITY['itl_ms']:g} ms per token, "
        f"{CAPACITY['output_tokens']} tokens per request, 256 requests.\n\n"
        "| client | tokens/chunk | server sent tok/s | client tok/s | error % | client CPU µs/chunk |\n"
        "| --- | --- | --- | --- | --- | --- |")
    text = "\n".join([header, *rows, cap_header, *cap_rows]) + "\n"
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
