"""report.md and one self-contained report.html (plots inlined as base64 PNG) from a RunData."""
from __future__ import annotations

import base64
import html
import json
from datetime import datetime, timezone
from typing import Any, Callable

from harness.bench.path import server_ttft_est_ms
from harness.report.accuracy import SECTION as ACCURACY_SECTION
from harness.report.families import SECTION as FAMILIES_SECTION
from harness.report.weights import SECTION as WEIGHTS_SECTION
from harness.report.weights import beside as weights_beside
from harness.report.weights import differences as weights_differences
from harness.report.weights import top_lines as weights_top_lines
from harness.report.data import RunData, knee_index, load_label, metric, per_token, sweeps
from harness.report.plots import cost_per_m, decode_vs_ceiling, latency_throughput
from harness.results import endpoints_from_meta


def _f(v: Any, spec: str = ".1f", none: str = "—") -> str:
    if v is None or v == "":
        return none
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return format(v, spec)
        except (ValueError, TypeError):  # e.g. a float where a whole number was expected
            return str(v)
    return str(v)[:200]


def _money(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "—"
    return f"${v:,.2f}" if v >= 0.995 else f"${v:.3f}"


# -- the tables, as (header, rows) shared by markdown and HTML ----------------------------------
def _ordered(run: RunData) -> list[tuple[str, dict]]:
    ends = (run.cost or {}).get("endpoints", {})
    return [(n, ends[n]) for n in run.endpoint_names() if n in ends]


Table = tuple[list[str], list[list[str]]]


def roofline_table(run: RunData) -> Table:
    head = ["backend", "instance", "precision", "decode tok/s", "ceiling tok/s", "of ceiling", "notes"]
    rows = []
    marks = weights_differences(run)[1]  # not the same weights as a backend of the same model
    for n, e in _ordered(run):
        r = e.get("roofline") or {}
        notes = "; ".join(r.get("warnings", []) + e.get("missing", []) + ([marks[n]] if n in marks else []))
        if per_token(e):
            notes = "model and hardware undisclosed: no ceiling"
        rows.append([run.display(n), e.get("instance_type") or ("managed" if per_token(e) else "—"), e.get("precision") or "—",
                     _f((e.get("measured") or {}).get("decode_tok_s")), _f(r.get("ceiling_tok_s"), ".0f"),
                     _f(e.get("efficiency"), ".0%"), notes])
    return head, rows


def cost_table(run: RunData) -> Table:
    head = ["backend", "instance", "$/hour", "$/month 24x7", "$/M out, 1 stream", "$/M out, 16 streams",
            "break-even tok/s", "price from"]
    rows = []
    for n, e in _ordered(run):
        price = e.get("price") or {}
        if per_token(e):
            per_m = e.get("usd_per_m_output_incl_input")
            rows.append([run.display(n), e.get("model_id") or "", "per token", "$0 idle", _money(per_m), _money(per_m), "—",
                         price.get("label", "—")])
            continue
        rows.append([run.display(n), e.get("instance_type") or "—", _f(e.get("usd_per_hour"), ".4f"),
                     _money(e.get("usd_per_month_24x7")), _money(e.get("usd_per_m_output_single")),
                     _money(e.get("usd_per_m_output_c16")), _f(e.get("break_even_tok_s"), ",.0f"),
                     price.get("label", "—") + (f" ({price['note']})" if price.get("note") else "")])
    return head, rows


def bench_table(run: RunData) -> Table:
    head = ["backend", "load", "ok", "failed", "errors", "TTFT p50 / p99 ms", "path RTT p50 / p99 ms",
            "server TTFT p50 (est.) ms", "ITL p50 ms", "TPOT p50 ms", "e2e p50 ms", "output tok/s", "req/s",
            "goodput req/s", "client CPU (cores)", "knee"]
    rows = []
    for n in run.endpoint_names():
        for _kind, ordered in sweeps(run.bench.get(n, [])):
            k = knee_index(ordered)
            rows += [_bench_row(run.display(n), lv, i == k) for i, lv in enumerate(ordered)]
    return head, rows


def _path(lv: dict) -> str:
    p = lv.get("path_rtt_ms") if isinstance(lv.get("path_rtt_ms"), dict) else {}
    if not p.get("n"):
        return "—"
    return f"{_f(p.get('p50'))} / {_f(p.get('p99'))}"


def _client_cores(lv: dict) -> float | None:
    """The load generator's CPU while the level ran, in cores: client CPU per chunk x chunks per
    second (= client CPU seconds / level seconds). On an instance it is taken from the server."""
    cpu, t0, t1 = lv.get("client_cpu_s"), lv.get("started"), lv.get("ended")
    if not all(isinstance(v, (int, float)) for v in (cpu, t0, t1)) or not t1 > t0:
        return None
    return cpu / (t1 - t0)


def _cores_text(lv: dict) -> str:
    """Client CPU in cores; on the instance also as a share of its CPUs (taken from the server)."""
    cores, cpus = _client_cores(lv), lv.get("instance_cpus")
    if cores is None:
        return "—"
    if lv.get("bench_from") == "instance" and isinstance(cpus, int) and cpus > 0:
        return f"{cores:.2f} of {cpus} ({cores / cpus:.0%})"
    return f"{cores:.2f}"


def _bench_row(n: str, lv: dict, knee: bool) -> list[str]:
    errors = lv.get("errors") if isinstance(lv.get("errors"), dict) else {}
    errs = ", ".join(f"{c}: {v}" for c, v in errors.items()) or "—"
    label = load_label(lv) + (" (incomplete)" if lv.get("complete") is False else "")
    where = " (bench on the instance)" if lv.get("bench_from") == "instance" else ""
    ttft50 = metric(lv, "ttft_ms", "p50")
    return [n + where, label, _f(lv.get("completed"), "d"), _f(lv.get("failed"), "d"), errs,
            f"{_f(ttft50, '.0f')} / {_f(metric(lv, 'ttft_ms', 'p99'), '.0f')}", _path(lv),
            _f(server_ttft_est_ms(ttft50, lv.get("path_rtt_ms")), ".0f"),
            _f(metric(lv, "itl_ms", "p50")), _f(metric(lv, "tpot_ms", "p50")), _f(metric(lv, "e2e_ms", "p50"), ".0f"),
            _f(lv.get("output_tok_s")), _f(lv.get("request_s"), ".2f"), _f(lv.get("goodput_request_s"), ".2f"),
            _cores_text(lv), "knee" if knee else ""]


def agent_table(run: RunData) -> Table:
    head = ["backend", "run", "result", "quoted", "filters", "seconds", "error"]
    rows = [[run.display(str(r.get("backend"))), f"{r.get('run', '?')}/{r.get('runs', '?')}", "pass" if r.get("ok") else "FAIL",
             _f(r.get("quoted"), "d" if isinstance(r.get("quoted"), int) else ""), str(r.get("filters") or []),
             _f(r.get("seconds"), ".2f"), r.get("error") or ""] for r in run.agent_runs]
    return head, rows


def scoreboard_table(run: RunData) -> Table:
    keys = list(dict.fromkeys(k for r in run.scoreboard for k in r))
    return keys, [[_f(r.get(k), ".3g") if isinstance(r.get(k), float) else str(r.get(k, "")) for k in keys]
                  for r in run.scoreboard]


def when(value: Any) -> str:
    """A run timestamp as UTC text: meta.json holds epoch seconds (or already a string)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (OverflowError, OSError, ValueError):  # not an epoch time: show it as saved
            return str(value)
    return str(value) if value is not None else ""


def finished(meta: dict) -> Any:
    return meta.get("finished_at", meta.get("ended_at"))


def config_table(run: RunData) -> Table:
    rows = []
    for section in ("versions", "config"):
        value = run.meta.get(section)
        items = value.items() if isinstance(value, dict) else [("", value)] if value is not None else []
        for k, v in items:
            rows.append([section, k, v if isinstance(v, str) else json.dumps(v)])
    for k in ("run_id", "region"):
        if k in run.meta:
            rows.append(["run", k, str(run.meta[k])])
    for k, v in (("started", run.meta.get("started_at")), ("finished", finished(run.meta))):
        if v is not None:
            rows.append(["run", k, when(v)])
    for name, ep in endpoints_from_meta(run.meta).items():
        desc = " · ".join(str(ep[k]) for k in ("protocol", "instance_type", "model_id", "region") if ep.get(k))
        rows.append(["endpoint", name, desc])
    return ["section", "key", "value"], rows


# -- headline figures ---------------------------------------------------------------------------
def headlines(run: RunData) -> list[tuple[str, str]]:
    out = []
    ends = (run.cost or {}).get("endpoints", {})
    speeds = [(e["measured"]["decode_tok_s"], n) for n, e in ends.items()
              if (e.get("measured") or {}).get("decode_tok_s") and not per_token(e)]
    if speeds:
        v, n = max(speeds)
        out.append(("fastest self-hosted single stream", f"{n}: {v:.1f} tok/s"))
    c16 = [(e["usd_per_m_output_c16"], n) for n, e in ends.items() if e.get("usd_per_m_output_c16")]
    if c16:
        v, n = min(c16)
        out.append(("cheapest instance, 16 streams", f"{n}: {_money(v)} per M output tokens"))
    be = [(e["break_even_tok_s"], n) for n, e in ends.items() if e.get("break_even_tok_s")]
    if be:
        v, n = min(be)
        out.append(("lowest break-even vs Bedrock", f"{n}: {v:,.0f} output tok/s 24x7"))
    if run.agent_runs:
        ok = sum(1 for r in run.agent_runs if r.get("ok"))
        out.append(("agent trial", f"{ok} of {len(run.agent_runs)} runs passed (answer 8 and filter id >= 10)"))
    return out


def price_provenance(run: RunData) -> list[str]:
    lines = [run.cost_note] if run.cost_note else list((run.cost or {}).get("price_notes", []))
    labels = sorted({(e.get("price") or {}).get("label") for e in (run.cost or {}).get("endpoints", {}).values()} - {None})
    if labels:
        lines.append("prices used: " + ", ".join(labels))
    return lines


# -- markdown -----------------------------------------------------------------------------------
def _md_table(t: Table) -> str:
    head, rows = t
    if not rows:
        return "_none in this run_\n"
    def esc(s) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


SECTIONS: list[tuple[str, str, Callable[[RunData], Table], Callable[[RunData], bytes | None] | None, str]] = [
    WEIGHTS_SECTION,
    ("speed", "Decode speed against the roofline", roofline_table, decode_vs_ceiling,
     "Ceiling = memory bandwidth / bytes read per generated token (weights actually read, tied LM head "
     "included, embedding tables only looked up, plus the KV cache at 512 tokens of context)."),
    FAMILIES_SECTION,
    ("cost", "Cost per million output tokens", cost_table, cost_per_m,
     "Instances priced running 24x7 flat out at the measured throughput; break-even is the average output "
     "rate at which the instance costs what Bedrock Nova Micro would."),
    ("latency", "Latency against throughput", bench_table, latency_throughput,
     "Each point is one load level (c = concurrent streams, req/s = Poisson rate). Failed requests are "
     "excluded from latencies and counted. The knee is the last level before median latency grows by a "
     "larger factor than throughput (the bench's definition). Path RTT: small round trips over the same "
     "path (tunnel, internet) before the levels; server TTFT (est.) = TTFT minus the path's median RTT, an "
     "estimate, not a measurement. Client CPU: the load generator's CPU per chunk x chunks per second; "
     "for a bench run on the instance it is taken from the server's own CPUs."),
    ("agent", "Agent trial", agent_table, None,
     "A run passes only if the model quoted 8 and called count_ids with the filter id >= 10."),
    ("scoreboard", "Scoreboard agent", scoreboard_table, None, "Sorted by code, not by the model."),
    ACCURACY_SECTION,
    ("config", "Versions and configuration", config_table, None, "From meta.json."),
]


def _caption(run: RunData, key: str, caption: str) -> str:
    if key == "agent" and run.agent_runs:
        tally: dict[str, list[int]] = {}
        for r in run.agent_runs:
            t = tally.setdefault(str(r.get("backend")), [0, 0])
            t[0] += bool(r.get("ok"))
            t[1] += 1
        caption += " Passed: " + ", ".join(f"{b} {ok}/{n}" for b, (ok, n) in tally.items()) + "."
    if key == "latency":
        caption += f" SLO line: P99 TTFT <= {run.slo_ttft_p99_ms:.0f} ms ({run.slo_origin})."
    return caption + (_guarded(run, "weights", lambda r: weights_beside(r, key)) or "")


def markdown(run: RunData) -> str:
    out = [f"# Inference on AWS: run {run.run_id}", ""]
    flags = _guarded(run, "weights", weights_top_lines) or []
    out += [f"> **{line}**" for line in flags] + ([""] if flags else [])
    out += [f"- **{k}**: {v}" for k, v in _guarded(run, "headlines", headlines) or []]
    out += [f"- _{line}_" for line in price_provenance(run)]
    if run.missing:
        out += ["", "**Missing from this run:** " + "; ".join(run.missing) + "."]
    body = []
    for _key, title, table, _plot, caption in SECTIONS:
        t = _guarded(run, title, table)
        body += [f"## {title}", "", _caption(run, _key, caption), "", _md_table(t) if t else
                 "_not rendered: see the skipped list above_\n"]
    if run.notes:  # after the sections: a section that could not render adds its line too
        out += ["", "**Skipped while reading this run:**", ""] + [f"- {n}" for n in dict.fromkeys(run.notes)]
    out += ["", "Plots: see report.html next to this file.", ""]
    return "\n".join(out + body)


def _guarded(run: RunData, title: str, fn: Callable[[RunData], Any]) -> Any:
    """``fn(run)``, or None with a note when the run's files hold something it cannot render (a
    section is dropped, the report still renders; what the reader validates comes first)."""
    try:
        return fn(run)
    except Exception as e:  # noqa: BLE001 - a file shape nobody foresaw: one section lost, not the report
        note = f"section {title!r} not rendered: {type(e).__name__}: {str(e)[:120]}"
        if note not in run.notes:
            run.notes.append(note)
        return None


# -- HTML ---------------------------------------------------------------------------------------
CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;background:#f4f5f7;color:#1d2430}
header{background:#232f3e;color:#fff;padding:24px 40px}header h1{margin:0 0 6px;font-size:26px}
header p{margin:2px 0;color:#c9d1dc;font-size:13px}main{max-width:1180px;margin:0 auto;padding:20px 40px 60px}
.cards{display:flex;flex-wrap:wrap;gap:14px;margin:18px 0}.card{background:#fff;border-radius:8px;padding:14px 18px;
flex:1 1 230px;box-shadow:0 1px 3px rgba(0,0,0,.12);border-top:4px solid #ff9900}.card b{display:block;font-size:12px;
text-transform:uppercase;color:#5f6b7a;letter-spacing:.04em}.card span{font-size:19px;font-weight:600}
.missing{background:#fff4e5;border-left:5px solid #ff9900;padding:10px 16px;border-radius:4px;margin:14px 0}
section{background:#fff;border-radius:8px;padding:18px 24px;margin:18px 0;box-shadow:0 1px 3px rgba(0,0,0,.1)}
section h2{margin-top:0;font-size:20px}.caption{color:#5f6b7a;font-size:13px}img{max-width:100%;display:block;margin:10px 0}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin-top:8px}th{background:#eef1f5;text-align:left}
th,td{padding:5px 8px;border-bottom:1px solid #e3e7ec;vertical-align:top}td.pass{color:#1e7b34;font-weight:600}
td.FAIL{color:#c62828;font-weight:700}.none{color:#888;font-style:italic}
"""


def _html_table(t: Table) -> str:
    head, rows = t
    if not rows:
        return '<p class="none">none in this run</p>'
    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f'<td class="{html.escape(str(c))}">{html.escape(str(c))}</td>'
                                    if c in ("pass", "FAIL") else f"<td>{html.escape(str(c))}</td>" for c in r)
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def html_page(run: RunData) -> str:
    e = html.escape
    sub = [f"region {e(str(run.meta.get('region', '—')))}",
           f"{e(when(run.meta.get('started_at')))} → {e(when(finished(run.meta)))}"]
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Run {e(run.run_id)}</title>"
             f"<style>{CSS}</style></head><body><header><h1>Inference on AWS: run {e(run.run_id)}</h1>"
             f"<p>{' · '.join(sub)}</p>" + "".join(f"<p>{e(line)}</p>" for line in price_provenance(run))
             + "</header><main>"]
    flags = _guarded(run, "weights", weights_top_lines) or []
    if flags:
        parts.append("<div class='missing'>" + "".join(f"<p><b>{e(line)}</b></p>" for line in flags) + "</div>")
    cards = _guarded(run, "headlines", headlines)
    if cards:
        parts.append("<div class='cards'>" + "".join(f"<div class='card'><b>{e(k)}</b><span>{e(v)}</span></div>"
                                                  for k, v in cards) + "</div>")
    if run.missing:
        parts.append("<div class='missing'><b>Missing from this run:</b> " + e("; ".join(run.missing)) + ".</div>")
    body = []
    for key, title, table, plot, caption in SECTIONS:
        body.append(f"<section id='{key}'><h2>{e(title)}</h2><p class='caption'>{e(_caption(run, key, caption))}</p>")
        png = _guarded(run, title + " (plot)", plot) if plot else None
        if png:
            b64 = base64.b64encode(png).decode("ascii")
            body.append(f"<img alt='{e(title)}' src='data:image/png;base64,{b64}'>")
        t = _guarded(run, title, table)
        body.append((_html_table(t) if t else '<p class="none">not rendered: see the skipped list</p>')
                    + "</section>")
    if run.notes:  # after the sections: a section that could not render adds its line too
        parts.append("<div class='missing'><b>Skipped while reading this run:</b><ul>"
                     + "".join(f"<li>{e(n)}</li>" for n in dict.fromkeys(run.notes)) + "</ul></div>")
    parts += body
    parts.append("</main></body></html>")
    return "".join(parts)
