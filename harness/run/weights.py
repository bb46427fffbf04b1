"""What each backend of a run serves: the weights' repository, the commit, how it was chosen, and
a digest of its config and tokenizer files; written to meta.json ``weights`` (kit/contracts/results.py
``ServedWeights``) and compared by the report (harness/report/weights.py).

Where each backend's record comes from, and why there:

- an EC2 backend: the file its boot wrote (kit/weights.py ``SERVED_RECORD``, userdata/lib.sh
  ``kit_record_model``), read over the SSH connection the run's tunnel already holds (one
  ``cat``, no second login, no port). The instance is the one place that knows what it downloaded
  for every engine alike (vLLM's ``/v1/models`` names the model, not its commit), and the record
  is rewritten each time the server starts, so it is what runs now, not what the stack asked for;
- a server without an instance (``--endpoint``; ``make demo``): its ``GET /v1/models`` entry's
  ``weights`` object, which the kit's Neuron engine fills (ami/neuron/served.py); another server
  has none, and the backend is shown as not recorded;
- SageMaker: nothing on the endpoint can be read back through the SageMaker API, so the commit is
  the one the stack gave the container (its ``ModelRevision`` output, SM_VLLM_REVISION): pinned,
  it is what vLLM downloaded; unpinned, not known, and the report says so;
- Bedrock: another model (Nova Micro), shown as such.

A record that cannot be read is an ``error`` line for that backend; the run goes on.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Any, Callable

from harness.endpoint import Endpoint
from kit import catalog, variants
from kit.weights import REVISION, SERVED_RECORD, UNPINNED, weights_repo

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX = 64 * 1024  # a record is a few hundred bytes


def precision(ep: Endpoint) -> str | None:
    """The precision served or the package scheme: a package's scheme, the scheme its model id
    names (kit/variants.py), else the catalog backend's; a backend whose catalog row runs fp16
    (g5g: vLLM --dtype float16, Turing has no bf16) serves 16-bit weights in fp16."""
    scheme = ep.scheme or variants.scheme_of(ep.model_id)
    b = catalog.BACKENDS.get(variants.split(ep.name)[0]) if ep.service else None
    if b and b.precision == "fp16" and scheme in (None, variants.UNKNOWN_SCHEME, "bf16"):
        return "fp16"
    if scheme and scheme != variants.UNKNOWN_SCHEME:
        return scheme
    return b.precision if b else None


def from_record(raw: Any, source: str) -> dict[str, Any]:
    """A record (the boot's JSON, or the engine's ``weights`` object) as meta.json keeps it: only
    well-formed values; anything else is left out with an ``error`` naming it."""
    if not isinstance(raw, dict):
        return {"source": source, "error": "not a JSON object"}
    out: dict[str, Any] = {"source": source}
    bad = []
    for key, ok in (("model", lambda v: isinstance(v, str) and 0 < len(v) <= 200),
                    ("revision", lambda v: isinstance(v, str) and bool(REVISION.match(v) or v == "local")),
                    ("how", lambda v: isinstance(v, str) and len(v) <= 40),
                    ("digest", lambda v: isinstance(v, str) and bool(_HEX64.match(v))),
                    ("package_manifest", lambda v: isinstance(v, str) and bool(_HEX64.match(v))),
                    ("files", lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v) and len(v) <= 32)):
        v = raw.get(key)
        if v is None:
            continue
        if ok(v):
            out[key] = v.lower() if key == "revision" else v
        else:
            bad.append(key)
    if bad:
        out["error"] = f"ignored malformed {', '.join(bad)}"
    return out


def _remote(ep: Endpoint) -> dict[str, Any] | None:
    """The instance's record over the tunnel's SSH connection (None: no tunnel carries this endpoint)."""
    from harness.access.tunnel import forwarder_for

    fwd = forwarder_for(ep.base_url)
    if fwd is None or not hasattr(fwd, "run_remote"):
        return None
    where = f"instance {SERVED_RECORD}"
    try:
        status, out = fwd.run_remote(f"cat {shlex.quote(SERVED_RECORD)}")
    except Exception as e:  # noqa: BLE001 - the run goes on without it
        return {"source": where, "error": f"not read: {type(e).__name__}: {str(e)[:160]}"}
    if status != 0:
        return {"source": where, "error": f"not read (exit {status}): booted before the kit recorded weights?"}
    try:
        return from_record(json.loads(out[:_MAX]), where)
    except ValueError as e:
        return {"source": where, "error": f"not JSON: {str(e)[:120]}"}


def _engine(ep: Endpoint, timeout: float) -> dict[str, Any] | None:
    """The ``weights`` object of the server's ``GET /v1/models`` entry for its model (None: none)."""
    from harness.http_deadline import fetch

    if not ep.base_url:
        return None
    where = "GET /v1/models"
    try:
        status, raw = fetch(ep.base_url.rstrip("/") + "/models", deadline_s=timeout, cap=_MAX * 16,
                            headers={"Authorization": ep.auth} if ep.auth else {})
        data = json.loads(raw).get("data") if status == 200 else None
    except Exception as e:  # noqa: BLE001 - the run goes on without it
        return {"source": where, "error": f"not read: {type(e).__name__}: {str(e)[:160]}"}
    entries = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []
    entry = next((d for d in entries if d.get("id") == ep.model_id), entries[0] if entries else None)
    if not entry or "weights" not in entry:
        return None
    return from_record(entry["weights"], where)


def served(ep: Endpoint, *, timeout: float = 10.0) -> dict[str, Any]:
    """What ``ep`` serves, as meta.json ``weights`` holds it for one endpoint."""
    pinned = ep.model_revision if ep.model_revision and REVISION.match(ep.model_revision) else None
    base: dict[str, Any] = {"served_as": ep.model_id, "precision": precision(ep)}
    if ep.model_revision:
        base["pinned"] = pinned or UNPINNED
    if ep.service == "bedrock" or ep.protocol == "bedrock":
        return {**base, "model": ep.model_id, "different_model": True, "source": "Bedrock (managed)"}
    try:
        repo = weights_repo(ep.model_id)
    except ValueError:
        repo = ep.model_id
    if ep.service == "sagemaker" or ep.protocol == "sagemaker":
        rec = {"model": repo, "source": "stack output ModelRevision (given to the container)"}
        if pinned:
            return {**base, **rec, "revision": pinned, "how": "configured"}
        return {**base, **rec, "error": "unpinned: the container took the newest commit at deploy time and "
                                        "reports none; pin one with -c model_revision"}
    rec = _remote(ep) or _engine(ep, timeout)
    if rec is None:
        return {**base, "model": repo, "error": "not recorded by this server"}
    return {**base, "model": repo, **rec}


def collect(endpoints: list[Endpoint], echo: Callable[[str], None] = print, **kw: Any) -> dict[str, dict[str, Any]]:
    """Endpoint name -> what it serves, one line each on ``echo``."""
    out = {}
    for ep in endpoints:
        w = served(ep, **kw)
        out[ep.name] = w
        echo(f"weights    {ep.name}: {describe(w)}")
    return out


def describe(w: dict[str, Any]) -> str:
    """One line: model, commit (and how), digest, or why not."""
    if w.get("different_model"):
        return f"{w.get('model')} (another model)"
    text = str(w.get("model") or w.get("served_as") or "?")
    if w.get("revision"):
        text += f" @ {str(w['revision'])[:12]}" + (f" ({w['how']})" if w.get("how") else "")
    if w.get("digest"):
        text += f", config+tokenizer {w['digest'][:12]}"
    if w.get("package_manifest"):
        text += f", manifest {w['package_manifest'][:12]}"
    if w.get("error"):
        text += f" [{w['error']}]"
    return text
