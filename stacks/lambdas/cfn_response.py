"""The custom-resource response both Lambda handlers here send: a PUT of the JSON body to the
presigned ``ResponseURL`` CloudFormation put in the event, with an empty Content-Type (the URL
is signed without one). Fields: AWS CloudFormation User Guide, "Custom resource response
objects" (Status, Reason, PhysicalResourceId, StackId, RequestId, LogicalResourceId, Data).

Standard library only: stacks/lambda_code.py packs this file beside each handler's index.py.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any, Callable, Mapping


# "The total size of the response body can't exceed 4096 bytes" (same User Guide page).
MAX_BODY_BYTES = 4096


def body(event: Mapping[str, Any], status: str, physical_id: str, data: Mapping[str, str], reason: str = "") -> bytes:
    """The response body, its Reason cut to fit the body in MAX_BODY_BYTES: whole lines while they
    fit (a refusal is one line per missing thing, its fix at the end), else the first characters.
    A flat 1000-character cut dropped the last lines of a long refusal, well inside the limit."""
    def encode(text: str) -> bytes:
        return json.dumps({"Status": status, "Reason": text or status, "PhysicalResourceId": physical_id,
                           "StackId": event["StackId"], "RequestId": event["RequestId"],
                           "LogicalResourceId": event["LogicalResourceId"], "Data": dict(data)}).encode()
    out = encode(reason)
    if len(out) <= MAX_BODY_BYTES:
        return out
    lines = reason.splitlines()
    for n in range(len(lines) - 1, 0, -1):
        out = encode("\n".join(lines[:n] + [f"(... {len(lines) - n} more lines)"]))
        if len(out) <= MAX_BODY_BYTES:
            return out
    lo, hi = 0, len(reason)  # the longest prefix that fits (JSON escapes make characters longer)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(encode(reason[:mid])) <= MAX_BODY_BYTES else (lo, mid - 1)
    return encode(reason[:lo])


def respond(event: Mapping[str, Any], status: str, physical_id: str, data: Mapping[str, str],
            reason: str = "") -> None:
    """PUT the custom-resource response to the presigned ResponseURL (empty Content-Type)."""
    body_bytes = body(event, status, physical_id, data, reason)
    req = urllib.request.Request(event["ResponseURL"], data=body_bytes, method="PUT",
                                 headers={"Content-Type": "", "Content-Length": str(len(body_bytes))})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def answer(event: Mapping[str, Any], work: Callable[[], tuple[str, Mapping[str, str]]], *,
           known: tuple[type[BaseException], ...] = (), physical: str = "pending", unexpected: str = "",
           send=respond) -> None:
    """The response protocol every handler here follows for a resource that creates nothing:
    Delete succeeds at once; Create/Update run ``work()`` -> (physical id, data) and succeed with
    it; an error in ``known`` fails with its own one-line message, any other with its type and
    message after ``unexpected`` (what could not be done). Whatever happens CloudFormation gets an
    answer, never a stack left waiting for the service timeout."""
    physical = event.get("PhysicalResourceId") or physical
    if event["RequestType"] == "Delete":
        return send(event, "SUCCESS", physical, {})
    try:
        physical, data = work()
    except known as e:
        reason = str(e)
    except Exception as e:  # noqa: BLE001 - any other error still answers CloudFormation, with its reason
        reason = f"{unexpected}{type(e).__name__}: {e}"
    else:
        print(json.dumps({"physical": physical, "data": dict(data)}))
        return send(event, "SUCCESS", physical, data)
    print(json.dumps({"failed": reason}))
    return send(event, "FAILED", physical, {}, reason)
