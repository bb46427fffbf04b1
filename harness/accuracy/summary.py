"""``accuracy.json`` from the records alone (so a resumed or interrupted run summarizes the same
way): per backend accuracy with its interval, per pair the paired table and its statistics on the
items both finished."""
from __future__ import annotations

from itertools import combinations
from typing import Iterable

from harness.accuracy.stats import PairTable, backend_summary

Key = tuple[str, str, str]


def summarize(names: list[str], keys: Iterable[Key], results: dict[str, dict[Key, bool]]) -> dict:
    """``names`` in the order given (pairs are (a, b) with a before b); ``keys`` the selected
    items; ``results`` backend -> {key: correct}. Records of items not selected are ignored."""
    keys = list(keys)
    selected = set(keys)
    got = {n: {k: v for k, v in results.get(n, {}).items() if k in selected} for n in names}
    backends = {n: backend_summary(sum(got[n].values()), len(got[n]), len(got[n]) == len(selected))
                for n in names}
    pairs = []
    for a, b in combinations(names, 2):
        shared = [k for k in keys if k in got[a] and k in got[b]]
        t = PairTable(both=sum(got[a][k] and got[b][k] for k in shared),
                      a_only=sum(got[a][k] and not got[b][k] for k in shared),
                      b_only=sum(got[b][k] and not got[a][k] for k in shared),
                      neither=sum(not got[a][k] and not got[b][k] for k in shared))
        pairs.append({"a": a, "b": b, **t.summary()})
    return {"backends": backends, "pairs": pairs}
