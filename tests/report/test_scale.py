"""The report of a very large run renders, in time linear in its records.

20,000 agent records took 192 s (every table row scanned every record again to name its
endpoint) and 500 accuracy pairs 14.6 s (one plot row per pair; 20,000 would be an image over a
million pixels tall). No wall-clock assertion (it would flake on a busy machine): the work is
counted instead. Passes over the agent records must not grow with their number, and the plot
draws at most MAX_PLOTTED_PAIRS rows, whatever the number of pairs; every record and pair is
still in the tables.
"""
from __future__ import annotations

import copy
import json
import math

import pytest

from harness.report import accuracy as acc_section
from harness.report.data import load_run
from harness.report.page import markdown
from harness.results import write_json
from tests.report.synthetic import make_results

N = 20_000


class CountingList(list):
    """A list that counts how often it is walked from the start."""

    passes = 0

    def __iter__(self):
        CountingList.passes += 1
        return super().__iter__()


def _agent(i: int) -> dict:
    return {"backend": ["g6", "bedrock", "sagemaker", "g6@bf16"][i % 4], "run": i + 1, "runs": N,
            "ok": i % 3 != 0, "quoted": 8, "filters": ["id >= 10"], "seconds": 0.4, "error": None}


def _accuracy(run_dir, pairs: int) -> None:
    nb = (1 + math.isqrt(1 + 8 * pairs)) // 2 + 1
    names = [f"b{i}" for i in range(nb)]
    out = {"backends": {n: {"n": 500, "correct": 300, "accuracy": 0.6, "ci95": [0.55, 0.64], "complete": True}
                        for n in names}, "pairs": []}
    for i in range(nb):
        for j in range(i + 1, nb):
            if len(out["pairs"]) < pairs:
                k = len(out["pairs"])
                out["pairs"].append({"a": names[i], "b": names[j], "n": 500, "both": 250, "a_only": 50,
                                     "b_only": 40, "neither": 160, "diff": 0.02, "ci95": [-0.01, 0.05],
                                     "p_mcnemar": 0.5 - (k % 1000) / 2000, "min_detectable_diff": 0.05})
    write_json(run_dir / "accuracy" / "accuracy.json", out)
    write_json(run_dir / "accuracy" / "run.json", {"backends": {n: {"label": n, "status": "complete"} for n in names}})


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    run = make_results(tmp_path_factory.mktemp("scale"), parts=("meta", "bench", "scoreboard"))
    (run / "agent_runs.jsonl").write_text("".join(json.dumps(_agent(i)) + "\n" for i in range(N)))
    _accuracy(run, N)
    return run


@pytest.fixture(scope="module")
def loaded(big_run):
    return load_run(big_run)  # read once: each test takes a shallow copy with its own records


@pytest.mark.parametrize("n", [200, 2_000, N])
def test_passes_over_the_agent_records_do_not_grow_with_their_number(loaded, n):
    run = copy.copy(loaded)
    run.agent_runs = CountingList(loaded.agent_runs[:n])
    CountingList.passes = 0
    md = markdown(run)
    assert md.count("| pass |") + md.count("| FAIL |") == n  # every record is a row
    assert CountingList.passes <= 12, CountingList.passes  # a constant; it was one per row (n)


def test_the_difference_plot_draws_a_bounded_number_of_rows(big_run, monkeypatch):
    import matplotlib.axes

    drawn = []
    real = matplotlib.axes.Axes.errorbar
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", lambda self, *a, **kw: drawn.append(1) or real(self, *a, **kw))
    run = load_run(big_run)
    png = acc_section.difference_plot(run)
    assert png and png.startswith(b"\x89PNG") and len(drawn) == acc_section.MAX_PLOTTED_PAIRS
    head, rows = acc_section.accuracy_table(run)
    assert sum(" − " in r[0] for r in rows) == N  # every pair is in the table


def test_the_whole_report_of_20000_records_and_20000_pairs_renders(big_run):
    from harness.report import render

    notes: list[str] = []
    md_path, html_path = render(big_run, notes=notes)
    page = html_path.read_text()
    assert page.count('<td class="pass">') + page.count('<td class="FAIL">') == N
    assert page.count("data:image/png;base64,") == 4  # speed, cost, latency, accuracy
    md = md_path.read_text()
    assert md.count("| pass |") + md.count("| FAIL |") == N and notes == []
