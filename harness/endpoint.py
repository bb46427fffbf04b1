"""The one description of a deployed backend that every part of the harness passes around.

Discovery (harness.discovery) builds these from stack outputs or ``--endpoint NAME=URL``; the
agent trial, the load benchmark and the cost model only ever see an ``Endpoint``.

Two words, two concepts: ``protocol`` is how the harness speaks to the endpoint (the key of
``harness.protocols``); ``service`` is what bills for it (read only by the cost model), None for
a server given as ``--endpoint``. An EC2 backend speaks ``openai`` and bills as ``ec2``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

Protocol = Literal["openai", "sagemaker", "bedrock"]
Service = Literal["ec2", "sagemaker", "bedrock"]


@dataclass(frozen=True)
class Endpoint:
    name: str  # catalog backend id (g6, inf2, …), <id>@<variant>, or the NAME of --endpoint NAME=URL
    protocol: Protocol  # how the harness speaks to it
    model_id: str
    label: str = ""
    region: str | None = None
    tool_calls: bool = True
    instance_type: str | None = None
    service: Service | None = None  # what bills for it; None: a server the kit did not deploy
    # openai: the base URL ending in /v1 (for an EC2 backend: the local end of the tunnel)
    base_url: str | None = None
    # EC2 backends before the tunnel is opened
    instance_id: str | None = None
    port: int | None = None
    ssh_user: str | None = None  # OS user for EC2 Instance Connect (stack output SshUser)
    # sagemaker
    endpoint_name: str | None = None
    stack_name: str | None = None
    # A variant stack (kit/variants.py): its name (the endpoint is then ``<id>@<variant>``),
    # and the weight scheme its model id names (package scheme, bf16, w4a16; None when unknown).
    variant: str | None = None
    scheme: str | None = None

    def with_base_url(self, base_url: str) -> "Endpoint":
        return replace(self, base_url=base_url)

    def to_dict(self) -> dict:
        return asdict(self)


def saved_endpoint(d: dict[str, Any]) -> dict[str, Any]:
    """An endpoint as saved in a run's files, in today's words: results written before the rename
    carry the protocol under ``kind`` (and no ``service``); both are read the same way."""
    if "protocol" not in d and "kind" in d:
        d = {k: v for k, v in d.items() if k != "kind"} | {"protocol": d["kind"]}
    return d
