"""The report's accuracy section: from ``<run>/accuracy/accuracy.json`` and ``run.json``
(written by harness.accuracy). One table (a row per backend, then a row per pair) and one plot:
each pair's accuracy difference with its 95% interval, against zero."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from harness.results import read_file
from kit.contracts.results import ACCURACY, ACCURACY_RUN, BOS_NOT_CORRECTED

TITLE = "Accuracy: the same items on every backend"
CAPTION = ("Accuracy with a 95% Wilson interval per backend; per pair, on the items both finished: "
           "the difference A − B in points with its 95% interval (Newcombe's paired method), the exact "
           "McNemar p-value, and the smallest difference this many items detect (alpha 0.05 two-sided, "
           "power 0.80). An interval that contains 0 does not tell the two apart. "
           "Run with harness.run --accuracy or python -m harness.accuracy.")
BOS_NOTE = ("bos offset not corrected: its log-likelihood tasks were scored before the BOS-offset fix "
            "(on a server that puts <bos> before a text prompt, each log-likelihood also holds the last "
            "context token's); --resume with the backend asks them again")
HEAD = ["backend / pair", "n", "accuracy or A − B (pts)", "95% CI", "both / A only / B only / neither",
        "McNemar p", "detectable (pts)", "status"]


def _load(path: Path, notes: list[str] | None = None) -> tuple[dict | None, dict]:
    """accuracy.json and run.json, read as every file of a run is (harness.results: regular
    files inside the run directory only, capped; kit/contracts/results.py: wrong-typed entries
    dropped and noted); anything but an object reads as absent."""
    d = path / "accuracy"
    acc = read_file(d / "accuracy.json", ACCURACY, root=path, notes=notes, label="entries")
    if acc is None:
        return None, {}
    acc = in_range(acc, str(d / "accuracy.json"), notes)
    run = read_file(d / "run.json", ACCURACY_RUN, root=path, notes=notes, label="entries")
    return acc, run or {}


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _within(x: Any, lo: float, hi: float) -> bool:
    return _num(x) and lo <= x <= hi  # NaN (JSON allows it) is within nothing


def _problem(entry: Any, fractions: tuple[str, ...], lo: float, counts: tuple[str, ...]) -> str | None:
    """The first value of one accuracy.json entry outside what harness.accuracy can write: counts
    are whole numbers >= 0, fractions (and each end of ``ci95``) between ``lo`` and 1, a
    non-empty interval. None when every value it holds is in range (absent ones are fine)."""
    for k in counts:
        if entry.get(k) is not None and not _whole(entry[k]):
            return f"{k}={entry[k]!r:.40} is not a whole number >= 0"
    for k in fractions:
        if entry.get(k) is not None and not _within(entry[k], lo, 1):
            return f"{k}={entry[k]!r:.40} is outside {lo:g} to 1"
    ci = entry.get("ci95")
    if ci is not None:
        ends = [x for x in ci if x is not None]
        if len(ci) != 2 or not all(_within(x, lo, 1) for x in ends) or (len(ends) == 2 and ends[0] > ends[1]):
            return f"ci95={ci!r:.60} is not an interval within {lo:g} to 1"
    return None


def in_range(acc: dict, where: str, notes: list[str] | None) -> dict:
    """accuracy.json with every entry whose numbers are out of range left out (a hand-edited
    accuracy of 57 rendered as 5700%, a count of -3), named in one note line for the report's
    skipped list. The contract checks types; these are the ranges the table renders."""
    bad: list[str] = []
    backends = {}
    for name, b in (acc.get("backends") or {}).items():
        why = _problem(b, ("accuracy",), 0.0, ("n", "correct"))
        if why:
            bad.append(f"backend {name}: {why}")
        else:
            backends[name] = b
    pairs = []
    for p in acc.get("pairs") or []:
        why = _problem(p, ("diff",), -1.0, ("n", "both", "a_only", "b_only", "neither")) or next(
            (f"{k}={p[k]!r:.40} is outside 0 to 1" for k in ("p_mcnemar", "min_detectable_diff")
             if p.get(k) is not None and not _within(p[k], 0, 1)), None)
        if why:
            bad.append(f"pair {p.get('a')} - {p.get('b')}: {why}")
        else:
            pairs.append(p)
    if bad and notes is not None:
        notes.append(f"{where}: entries out of range left out: " + "; ".join(bad[:6])
                     + (f"; and {len(bad) - 6} more" if len(bad) > 6 else ""))
    return {**acc, "backends": backends, "pairs": pairs}


def _pts(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{100 * x:+.1f}"


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{100 * x:.1f}"


def accuracy_table(run: Any) -> tuple[list[str], list[list[str]]]:
    acc, meta = _load(Path(run.path), getattr(run, "notes", None))
    if not acc:
        return HEAD, []
    rows = []
    for name, b in acc.get("backends", {}).items():
        info = meta.get("backends", {}).get(name, {})
        lo, hi = b.get("ci95") or [None, None]
        status = info.get("status") or ("complete" if b.get("complete") else "incomplete")
        if info.get("bos_offset") == BOS_NOT_CORRECTED:  # kit/contracts/results.py: run.json before version 2
            status += f"; {BOS_NOTE}"
        rows.append([info.get("label") or name, str(b.get("n")), f"{_pct(b.get('accuracy'))}%",
                     f"{_pct(lo)} – {_pct(hi)}", "", "", "", status])
    for p in acc.get("pairs", []):
        lo, hi = p.get("ci95") or [None, None]
        rows.append([f"{p['a']} − {p['b']}", str(p.get("n")), _pts(p.get("diff")), f"{_pts(lo)} – {_pts(hi)}",
                     f"{p.get('both')} / {p.get('a_only')} / {p.get('b_only')} / {p.get('neither')}",
                     f"{p['p_mcnemar']:.3g}" if isinstance(p.get("p_mcnemar"), (int, float)) else "—",
                     _pct(p.get("min_detectable_diff")), ""])
    return HEAD, rows


MAX_PLOTTED_PAIRS = 40  # rows of the plot; the table lists every pair


def _plotted(pairs: list[dict]) -> tuple[list[dict], str]:
    """At most MAX_PLOTTED_PAIRS pairs, and the title's note. A plot's height and drawing time
    grow with its rows (500 pairs took 14.6 s; 20,000 would be an image over 1,000,000 pixels
    tall): past the cap, the pairs with the smallest McNemar p-value (the strongest evidence of
    a difference), in their table order."""
    if len(pairs) <= MAX_PLOTTED_PAIRS:
        return pairs, ""
    p_of = lambda p: p["p_mcnemar"] if isinstance(p.get("p_mcnemar"), (int, float)) else 1.0  # noqa: E731
    keep = {id(p) for p in sorted(pairs, key=p_of)[:MAX_PLOTTED_PAIRS]}
    return ([p for p in pairs if id(p) in keep],
            f" ({MAX_PLOTTED_PAIRS} of {len(pairs)} pairs: smallest McNemar p; all are in the table)")


def difference_plot(run: Any) -> bytes | None:
    acc, _ = _load(Path(run.path))
    pairs = [p for p in (acc or {}).get("pairs", []) if isinstance(p, dict) and _plottable(p)]
    if not pairs:
        return None
    pairs, note = _plotted(pairs)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.6 * len(pairs) + 1.4))
    for i, p in enumerate(reversed(pairs)):
        d, (lo, hi) = 100 * p["diff"], (100 * p["ci95"][0], 100 * p["ci95"][1])
        clear = lo > 0 or hi < 0
        ax.errorbar([d], [i], xerr=[[d - lo], [hi - d]], fmt="o", capsize=4,
                    color="#c62828" if clear else "#232f3e")
        ax.annotate(f"n={p['n']}, p={p['p_mcnemar']:.2g}", (hi, i), xytext=(6, -3),
                    textcoords="offset points", fontsize=8, color="#5f6b7a")
    ax.axvline(0, color="#888", lw=1, ls="--")
    ax.set_yticks(range(len(pairs)), [f"{p['a']} − {p['b']}" for p in reversed(pairs)])
    ax.set_xlabel("accuracy difference A − B (points), 95% interval")
    ax.set_title("Paired accuracy differences against zero" + note)
    ax.set_ylim(-0.7, len(pairs) - 0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return buf.getvalue()


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _plottable(p: dict) -> bool:
    ci = p.get("ci95")
    return (_num(p.get("diff")) and isinstance(ci, list) and len(ci) == 2 and all(map(_num, ci))
            and _num(p.get("p_mcnemar")))


SECTION = ("accuracy", TITLE, accuracy_table, difference_plot, CAPTION)
