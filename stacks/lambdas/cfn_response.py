"""The custom-resource response both Lambda handlers here send: a PUT of the JSON body to the
presigned ``ResponseURL`` CloudFormation put in the event, with an empty Content-Type (the URL
is signed without one). Fields: AWS CloudFormation User Guide, "Custom resource response
objects" (Status, Reason, PhysicalResourceId, StackId, RequestId, LogicalResourceId, Data).

Standard library only: stacks/lambda_code.py packs this file beside each handler's index.py.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any, Mapping


def respond(event: Mapping[str, Any], status: str, physical_id: str, data: Mapping[str, str],
            reason: str = "") -> None:
    """PUT the custom-resource response to the presigned ResponseURL (empty Content-Type)."""
    body = json.dumps({"Status": status, "Reason": reason[:1000] or status, "PhysicalResourceId": physical_id,
                       "StackId": event["StackId"], "RequestId": event["RequestId"],
                       "LogicalResourceId": event["LogicalResourceId"], "Data": dict(data)}).encode()
    req = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                 headers={"Content-Type": "", "Content-Length": str(len(body))})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
