"""The one description of a deployed backend that every part of the harness passes around.

Discovery (harness.discovery) builds these from stack outputs or ``--endpoint NAME=URL``; the
agent trial, the load benchmark and the cost model only ever see an ``Endpoint``.

Two words, two concepts: ``protocol`` is how the harness speaks to the endpoint (the key of
``harness.protocols``); ``service`` is what bills for it (read only by the cost model), None for
a server given as ``--endpoint``. An EC2 backend speaks ``openai`` and bills as ``ec2``.
"""
from __future__ import annotations

import base64
import re
import urllib.parse
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kit.catalog import Protocol, Service  # the protocol and service words, one list each (kit/catalog.py)


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
    # The commit the stack pins for its weights (stack output ModelRevision, kit/weights.py), or
    # "unpinned"; None: not a kit stack, or one deployed before stacks said.
    model_revision: str | None = None
    # The Authorization header value for ``base_url`` (from credentials in an --endpoint URL,
    # ``split_credentials``): sent with every request, never shown (repr) or saved (to_dict).
    auth: str | None = field(default=None, repr=False, compare=False)

    def with_base_url(self, base_url: str) -> "Endpoint":
        return replace(self, base_url=base_url)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("auth", None)
        return d


def split_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:TOKEN@host/v1`` -> (``http://host/v1``, the HTTP Basic ``Authorization``
    value for user and TOKEN, RFC 7617; the userinfo is percent-decoded first, RFC 3986 section
    3.2.1). A URL without userinfo comes back as it is, with None. Only the URL without them is
    ever printed or saved; the credentials travel in the header (a URL's userinfo is not sent by
    HTTP clients, urllib resolved ``user:TOKEN@host`` as a host name)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    clean = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    return clean, "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]*@")


def redact(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``: for messages and
    argument lists that may quote an --endpoint value as given."""
    return _USERINFO.sub(r"\1***@", text)


def saved_endpoint(d: dict[str, Any]) -> dict[str, Any]:
    """An endpoint as saved in a run's files, in today's words: results written before the rename
    carry the protocol under ``kind`` (and no ``service``); both are read the same way."""
    if "protocol" not in d and "kind" in d:
        d = {k: v for k, v in d.items() if k != "kind"} | {"protocol": d["kind"]}
    return d
