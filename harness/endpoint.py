"""The one description of a deployed backend that every part of the harness passes around.

Discovery (harness.endpoints) builds these from stack outputs or ``--endpoint NAME=URL``; the
agent trial, the load benchmark and the cost model only ever see an ``Endpoint``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

Kind = Literal["openai", "sagemaker", "bedrock"]


@dataclass(frozen=True)
class Endpoint:
    name: str  # catalog backend id (g6, inf2, …) or the NAME of --endpoint NAME=URL
    kind: Kind  # protocol the harness speaks to it
    model_id: str
    label: str = ""
    region: str | None = None
    tool_calls: bool = True
    instance_type: str | None = None
    # openai: the base URL ending in /v1 (for an EC2 backend: the local end of the tunnel)
    base_url: str | None = None
    # EC2 backends before the tunnel is opened
    instance_id: str | None = None
    port: int | None = None
    ssh_user: str | None = None  # OS user for EC2 Instance Connect (stack output SshUser)
    # sagemaker
    endpoint_name: str | None = None
    stack_name: str | None = None

    def with_base_url(self, base_url: str) -> "Endpoint":
        return replace(self, base_url=base_url)

    def to_dict(self) -> dict:
        return asdict(self)
