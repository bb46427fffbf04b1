"""The report's "Weights served" section, and the warning at its top when backends that claim the
same model did not serve the same weights.

Reads meta.json ``weights`` (harness/run/weights.py; kit/contracts/results.py ``ServedWeights``). Two
endpoints claim the same model when they serve the same repository (a package: its source). They
differ when their commits differ, or when the same commit at the same precision came with
different config or tokenizer files (digest). A commit that is not known (SageMaker unpinned, a
server that records nothing) cannot be confirmed the same: said, not flagged. Bedrock runs another
model and is shown as one. A run from before weights were recorded (meta.json version 1) says so.
"""
from __future__ import annotations

from typing import Any

from kit.weights import short

CAPTION = ("What each backend served: the weights' repository (a package: its source), the commit and "
           "how it was chosen (pinned: -c model_revision; resolved: the newest when the instance first "
           "downloaded it, kept since; image: baked into the machine image; configured: given to the "
           "SageMaker container, not read back), the precision or package scheme, and the sha256 over "
           "the config and tokenizer files (kit/weights.py), from the instance's record, the engine's "
           "/v1/models or the stack's output.")


def served(run: Any) -> dict[str, dict]:
    w = run.meta.get("weights")
    return {k: v for k, v in w.items() if isinstance(v, dict)} if isinstance(w, dict) else {}


def _order(run: Any, weights: dict[str, dict]) -> list[str]:
    names = [n for n in run.endpoint_names() if n in weights]
    return names + sorted(n for n in weights if n not in names)


def _repo(w: dict) -> str | None:
    m = w.get("model")
    return m.lower() if isinstance(m, str) and not w.get("different_model") else None


def differences(run: Any) -> tuple[list[str], dict[str, str], list[str]]:
    """(warning lines, endpoint -> what its figures must be read with, lines of what could not be
    confirmed) for the endpoints of one repository that did not serve the same weights."""
    weights = served(run)
    names = _order(run, weights)
    groups: dict[str, list[str]] = {}
    for n in names:
        repo = _repo(weights[n])
        if repo:
            groups.setdefault(repo, []).append(n)
    warnings, marks, unconfirmed = [], {}, []
    for repo, members in groups.items():
        if len(members) < 2:
            continue
        model = weights[members[0]].get("model")
        known = [n for n in members if weights[n].get("revision")]
        revs: dict[str, list[str]] = {}
        for n in known:
            revs.setdefault(weights[n]["revision"], []).append(n)
        if len(revs) > 1:
            parts = "; ".join(f"{', '.join(run.display(n) for n in ns)} at {short(r)}"
                              + _how(weights[ns[0]]) for r, ns in revs.items())
            warnings.append(f"{model} was served at {len(revs)} commits: {parts}")
            for r, ns in revs.items():
                others = ", ".join(f"{short(o)}" for o in revs if o != r)
                for n in ns:
                    marks[n] = f"weights: {model} at {short(r)}, others at {others}"
        for r, ns in revs.items():  # one commit, one precision, different files
            by_precision: dict[Any, list[str]] = {}
            for n in ns:
                by_precision.setdefault(weights[n].get("precision"), []).append(n)
            for prec, same in by_precision.items():
                digests = {weights[n].get("digest") for n in same} - {None}
                if len(digests) > 1:
                    warnings.append(f"{model} at {short(r)}{f' ({prec})' if prec else ''}: different config or "
                                    "tokenizer files: " + ", ".join(f"{run.display(n)} {str(weights[n].get('digest'))[:12]}"
                                                                    for n in same if weights[n].get("digest")))
                    for n in same:
                        marks.setdefault(n, f"weights: config/tokenizer digest {str(weights[n].get('digest'))[:12]} "
                                            "differs from the same commit elsewhere")
        unknown = [n for n in members if n not in known]
        if unknown and known:
            unconfirmed.append(f"{model}: not confirmed the same on {', '.join(run.display(n) for n in unknown)} "
                               f"({'; '.join(str(weights[n].get('error') or 'no commit recorded') for n in unknown)})")
    return warnings, marks, unconfirmed


def _how(w: dict) -> str:
    return f" ({w['how']})" if w.get("how") else ""


def weights_table(run: Any) -> tuple[list[str], list[list[str]]]:
    head = ["backend", "model (repository)", "commit", "how", "precision / scheme", "config+tokenizer sha256",
            "package manifest sha256", "read from", "notes"]
    weights = served(run)
    _, marks, _ = differences(run)
    rows = []
    for n in _order(run, weights):
        w = weights[n]
        if w.get("different_model"):
            rows.append([run.display(n), str(w.get("model") or "—"), "—", "—", "undisclosed", "—", "—",
                         str(w.get("source") or "—"), "another model: not the open weights the others serve"])
            continue
        notes = "; ".join(x for x in (marks.get(n), w.get("error")) if x)
        if w.get("pinned") and w.get("revision") and w["pinned"] not in ("unpinned", w["revision"]):
            notes = "; ".join(x for x in (notes, f"the stack pins {short(w['pinned'])}") if x)
        rows.append([run.display(n), str(w.get("model") or "—"), short(w.get("revision")), str(w.get("how") or "—"),
                     str(w.get("precision") or "—"), str(w.get("digest") or "—")[:16],
                     str(w.get("package_manifest") or "—")[:16], str(w.get("source") or "—"), notes])
    if not rows and "weights" not in run.meta and run.meta:
        rows.append(["(all)", "—", "—", "—", "—", "—", "—", "—",
                     "not recorded: this run's meta.json is from before the kit recorded the weights served"])
    return head, rows


def top_lines(run: Any) -> list[str]:
    """The lines the report opens with: backends of one model that did not serve the same weights."""
    warnings, _, unconfirmed = differences(run)
    return [f"Not the same weights: {w}" for w in warnings] + [f"Weights not confirmed: {u}" for u in unconfirmed]


def beside(run: Any, key: str) -> str:
    """What a comparison's caption must add when its backends did not serve the same weights."""
    if key not in ("speed", "families", "cost", "latency", "accuracy"):
        return ""
    warnings, _, _ = differences(run)
    if not warnings:
        return ""
    return (" Not the same weights across these backends (see Weights served): "
            + "; ".join(warnings) + ". Differences here may come from the checkpoints, not the backends.")


SECTION = ("weights", "Weights served", weights_table, None, CAPTION)
