"""The report's plots (matplotlib, Agg), each returned as PNG bytes, each readable on its own:
a title that states the finding's question, axis labels with units, legends, labelled bars."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from kit import catalog
from harness.report.data import RunData, knee_index, load_label, metric, per_token, sweeps

COLORS = {b.id: b.color for b in catalog.BACKENDS.values() if b.color}  # each backend's colour
_SPARE = ["#17becf", "#bcbd22", "#e377c2", "#7f7f7f"]
# text.parse_math off: labels are endpoint names and prices taken from the run's files, and a
# name like "a$b$" would otherwise be parsed as mathtext (and a malformed one raise ValueError)
# (matplotlib >= 3.5, rcParams "text.parse_math": https://matplotlib.org/stable/users/explain/text/mathtext.html)
plt.rcParams.update({"font.size": 10, "axes.titlesize": 12, "axes.titleweight": "bold",
                     "axes.spines.top": False, "axes.spines.right": False, "text.parse_math": False})


def color(name: str, i: int = 0) -> str:
    return COLORS.get(name, _SPARE[i % len(_SPARE)])


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return buf.getvalue()


def decode_vs_ceiling(run: RunData) -> bytes | None:
    """Horizontal bars: measured one-stream decode tok/s in front of the roofline ceiling."""
    rows = []
    for n in run.endpoint_names():
        e = (run.cost or {}).get("endpoints", {}).get(n, {})
        tok = (e.get("measured") or {}).get("decode_tok_s")
        ceil = (e.get("roofline") or {}).get("ceiling_tok_s")
        if tok or ceil:
            rows.append((n, tok, ceil, e.get("efficiency")))
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.7 * len(rows) + 1.6))
    ys = range(len(rows))[::-1]
    for y, (n, tok, ceil, eff) in zip(ys, rows):
        if ceil:
            ax.barh(y, ceil, color="white", edgecolor=color(n), hatch="//", height=0.6, linewidth=1.2)
            ax.text(ceil, y + 0.33, f" ceiling {ceil:.0f}", va="bottom", ha="right", fontsize=8, color="#555")
        if tok:
            ax.barh(y, tok, color=color(n), height=0.6)
        txt = (f" {tok:.1f} tok/s" if tok else " not measured") + (
            f" = {eff:.0%} of ceiling" if eff else ("" if ceil else "  (ceiling undisclosed)"))
        ax.text(max(tok or 0, ceil or 0), y, txt, va="center", ha="left", fontsize=9, fontweight="bold")
    ax.set_yticks(list(ys), [r[0] for r in rows])
    ax.set_xlabel("decode tokens/s of one stream (1000 / median time per output token)")
    ax.set_xlim(0, max(max(r[1] or 0, r[2] or 0) for r in rows) * 1.45)
    ax.set_title("How close does each engine get to its chip's memory-bandwidth ceiling?")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#888", label="measured decode speed"),
                       Patch(facecolor="white", edgecolor="#888", hatch="//", label="roofline ceiling")],
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    return _png(fig)


def cost_per_m(run: RunData) -> bytes | None:
    """Grouped bars: $ per million output tokens at 1 and at 16 concurrent streams (log scale)."""
    ends = (run.cost or {}).get("endpoints", {})
    rows = []
    for n in run.endpoint_names():
        e = ends.get(n, {})
        if per_token(e) and e.get("usd_per_m_output_incl_input"):  # the same at any concurrency
            rows.append((n, e["usd_per_m_output_incl_input"], e["usd_per_m_output_incl_input"], True))
        elif e.get("usd_per_hour") is not None:
            rows.append((n, e.get("usd_per_m_output_single"), e.get("usd_per_m_output_c16"), False))
    if not any(v for r in rows for v in r[1:3]):
        return None
    fig, ax = plt.subplots(figsize=(9, 4.6))
    w = 0.38
    for i, (n, one, sixteen, by_token) in enumerate(rows):
        for dx, v, alpha, lab in ((-w / 2, one, 1.0, "1 stream"), (w / 2, sixteen, 0.55, "16 streams")):
            if v:
                ax.bar(i + dx, v, w, color=color(n), alpha=alpha, edgecolor=color(n))
                ax.text(i + dx, v * 1.08, f"${v:.2f}" if v >= 0.995 else f"${v:.3f}", ha="center",
                        va="bottom", fontsize=8)
            else:
                ax.text(i + dx, 0, "not\nmeasured", ha="center", va="bottom", fontsize=7, color="#777",
                        transform=ax.get_xaxis_transform())
    ratio = (run.cost or {}).get("input_per_output", 5)
    ax.set_xticks(range(len(rows)), [r[0] + ("\n(per token)" if r[3] else "") for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("US$ per million output tokens (log scale)")
    ax.set_title("What does a million output tokens cost, at 1 and at 16 concurrent streams?")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#666", label="1 stream"), Patch(color="#666", alpha=0.55, label="16 streams")],
              frameon=False, loc="upper right")
    ax.text(0.0, -0.2, f"Instances: hourly price / measured output tok/s, running flat out. Per-token service: "
            f"output price plus {ratio:g} input tokens per output token.", transform=ax.transAxes, fontsize=8,
            color="#555")
    ax.set_ylim(top=max(v for r in rows for v in r[1:3] if v) * 3)
    return _png(fig)


def latency_throughput(run: RunData) -> bytes | None:
    """Per backend: P99 TTFT and median ITL against output throughput, knee and SLO marked."""
    series = [(n, kind, sweep) for n in run.endpoint_names() for kind, sweep in sweeps(run.bench.get(n, []))]
    if not series:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6))
    slo = run.slo_ttft_p99_ms
    named: set[str] = set()
    for i, (n, kind, levels) in enumerate(series):
        style = "-o" if kind == "concurrency" else "--s"  # closed loop solid, Poisson rate dashed
        xs = [lv.get("output_tok_s") or 0 for lv in levels]
        k = knee_index(levels)
        for ax, (m, stat) in ((a1, ("ttft_ms", "p99")), (a2, ("itl_ms", "p50"))):
            ys = [metric(lv, m, stat) for lv in levels]
            pts = [(x, y, lv) for x, y, lv in zip(xs, ys, levels) if y is not None]
            if not pts:
                continue
            label = None if (n, ax) in named else n
            named.add((n, ax))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color(n, i), label=label, ms=5)
            for x, y, lv in pts:
                ax.annotate(load_label(lv), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=color(n, i))
            if k is not None and ys[k] is not None:
                ax.plot(xs[k], ys[k], marker="*", ms=16, color=color(n, i), markeredgecolor="black", zorder=5)
    a1.axhline(slo, color="crimson", ls="--", lw=1.2)
    a1.text(0.01, slo, f"SLO: P99 TTFT ≤ {slo:.0f} ms", color="crimson", ha="left", va="bottom", fontsize=8,
            transform=a1.get_yaxis_transform(), bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    a1.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    a1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    # label 200, 500, 2,000, 5,000 … as well, so the log axis reads without counting decades
    a1.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if f"{v:.0e}"[0] in "25" else ""))
    a1.set_ylabel("P99 time to first token (ms, log scale)")
    a2.set_ylabel("median inter-token latency (ms)")
    for ax in (a1, a2):
        ax.set_xlabel("output throughput (tokens/s, all streams)")
    a1.set_title("Latency against throughput: where is the knee?")
    a2.set_title("Per-token latency under load")
    from matplotlib.lines import Line2D

    handles, labels = a1.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="*", ls="", ms=12, color="#888", markeredgecolor="black"))
    labels.append("knee: last level before latency grows faster than throughput")
    if any(kind == "rate" for _, kind, _ in series):
        handles.append(Line2D([], [], ls="--", marker="s", color="#888"))
        labels.append("dashed: Poisson arrival rate (open loop)")
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False,
               bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    return _png(fig)
