"""One blocking question-answer call per protocol: ``Target.ask(messages) -> reply text``.

Every request is greedy and seeded (temperature 0, ``seed``), non-streaming. Errors split in two:
``ItemFailed`` (the server answered this item with a client error: the item is recorded as
failed and the run goes on) and ``BackendDown`` (connection refused or reset, timeouts, 5xx or
throttling after the retries: the backend stops, its finished items are kept).
"""
from __future__ import annotations

import json
import time
import urllib.error
from dataclasses import dataclass, field
from typing import Any, Callable

from harness import protocols
from harness.endpoint import Endpoint
from harness.http_deadline import Deadline, TooLarge, fetch

Messages = list[dict[str, str]]


class ItemFailed(RuntimeError):
    pass


class BackendDown(RuntimeError):
    pass


@dataclass(frozen=True)
class Settings:
    seed: int = 1234
    max_tokens: int = 1024
    timeout: float = 300.0
    retries: int = 3
    retry_base_s: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": 0, "seed": self.seed, "max_tokens": self.max_tokens,
                "timeout_s": self.timeout, "retries": self.retries}


@dataclass
class Target:
    """A backend as the accuracy stage sees it: a name, a model id, a way to ask."""
    name: str
    model_id: str
    protocol: str
    ask: Callable[[Messages], str] = field(repr=False)
    label: str = ""
    base_url: str | None = None  # set for OpenAI-compatible servers (lm-eval talks to these)
    completions_echo: bool | None = None  # /v1/completions with echo (None: not probed)
    echo: Any = field(default=None, repr=False)  # that probe's harness.accuracy.lmeval.Echo (None: none)
    chat_refusal: str | None = None  # the server's 400 to lm-eval's seed/stop ("" when accepted; None: not probed)
    auth: str | None = field(default=None, repr=False)  # Authorization for base_url (harness.endpoint)


def _with_retries(call: Callable[[], str], s: Settings) -> str:
    last: BaseException | None = None
    for attempt in range(s.retries + 1):
        try:
            return call()
        except BackendDown as e:
            last = e
            if attempt < s.retries:
                time.sleep(min(30.0, s.retry_base_s * 2 ** attempt))
    raise BackendDown(str(last)) from None


# Servers that refuse a request field rather than ignore it: the kit's own Neuron engine answers
# 400 to a seed when sampling (it takes one with temperature 0) and to stop sequences
# (ami/neuron/api.py). Greedy decoding needs no seed, so a refused seed is dropped for that
# server and the run says so.
OPTIONAL_FIELDS = ("seed",)


class OpenAIAsk:
    """POST /v1/chat/completions, non-streaming, greedy and seeded; ``dropped`` lists the optional
    fields this server refused (then sent without)."""

    def __init__(self, base_url: str, model: str, s: Settings, auth: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.s = model, s
        self.auth = {"Authorization": auth} if auth else {}
        self.dropped: set[str] = set()

    def body(self, msgs: Messages, max_tokens: int | None = None) -> dict[str, Any]:
        b = {"model": self.model, "messages": msgs, "temperature": 0, "seed": self.s.seed,
             "max_tokens": max_tokens or self.s.max_tokens, "stream": False}
        return {k: v for k, v in b.items() if k not in self.dropped}

    def once(self, msgs: Messages, max_tokens: int | None = None) -> str:
        sent = self.body(msgs, max_tokens)
        try:  # --request-timeout is the whole request's deadline, not one socket read's
            status, raw = fetch(self.url, deadline_s=self.s.timeout, data=json.dumps(sent).encode(),
                                headers={"Content-Type": "application/json", **self.auth})
        except Deadline as e:
            raise BackendDown(f"{self.url}: {e} (--request-timeout)") from None
        except TooLarge as e:
            raise ItemFailed(f"{self.url}: {e}") from None
        except (urllib.error.URLError, OSError) as e:  # refused, reset
            raise BackendDown(f"{self.url}: {getattr(e, 'reason', None) or e}") from None
        if status >= 400:
            detail = raw[:300].decode("utf-8", "replace")
            if status == 429 or status >= 500:
                raise BackendDown(f"HTTP {status} from {self.url}: {detail}")
            refused = [f for f in OPTIONAL_FIELDS if f in sent and f in detail]
            if status == 400 and refused:
                self.dropped.update(refused)
                return self.once(msgs, max_tokens)
            raise ItemFailed(f"HTTP {status} from {self.url}: {detail}")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ItemFailed(f"{self.url}: reply is not JSON ({str(e)[:100]})") from None
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise ItemFailed(f"{self.url}: reply has no choices[0].message.content") from None

    def __call__(self, msgs: Messages, max_tokens: int | None = None) -> str:
        return _with_retries(lambda: self.once(msgs, max_tokens), self.s)


def openai_ask(base_url: str, model: str, s: Settings, auth: str | None = None) -> OpenAIAsk:
    return OpenAIAsk(base_url, model, s, auth)


_RETRYABLE = ("throttl", "toomanyrequests", "serviceunavailable", "servicequotaexceeded", "modelnotready")


def _boto_call(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as e:  # noqa: BLE001 - botocore raises many types; sorted by code and status
        resp = getattr(e, "response", None) or {}
        code = str((resp.get("Error") or {}).get("Code") or type(e).__name__)
        status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if any(w in code.lower() for w in _RETRYABLE) or status is None or status >= 500:
            raise BackendDown(f"{code}: {str(e)[:200]}") from None
        raise ItemFailed(f"{code}: {str(e)[:200]}") from None


def sagemaker_ask(ep: Endpoint, s: Settings, client: Any) -> Callable[[Messages], str]:
    """The OpenAI chat body on /invocations, as the kit's SageMaker backend serves it
    (harness.bench.clients.sagemaker sends the same body)."""

    def once(msgs: Messages, max_tokens: int | None) -> str:
        body = json.dumps({"model": ep.model_id, "messages": msgs, "temperature": 0, "seed": s.seed,
                           "max_tokens": max_tokens or s.max_tokens, "stream": False})
        resp = _boto_call(lambda: client.invoke_endpoint(EndpointName=ep.endpoint_name, Body=body,
                                                         ContentType="application/json"))
        try:
            data = json.loads(resp["Body"].read())
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError, ValueError):
            raise ItemFailed(f"{ep.endpoint_name}: reply has no choices[0].message.content") from None

    return lambda msgs, max_tokens=None: _with_retries(lambda: once(msgs, max_tokens), s)


def bedrock_ask(ep: Endpoint, s: Settings, client: Any) -> Callable[[Messages], str]:
    """Bedrock Converse. It has no seed parameter; temperature 0 is as greedy as it gets."""

    def once(msgs: Messages, max_tokens: int | None) -> str:
        conv = [{"role": m["role"], "content": [{"text": m["content"]}]} for m in msgs if m["role"] != "system"]
        kw: dict[str, Any] = {"modelId": ep.model_id, "messages": conv,
                              "inferenceConfig": {"maxTokens": max_tokens or s.max_tokens, "temperature": 0}}
        system = [{"text": m["content"]} for m in msgs if m["role"] == "system"]
        if system:
            kw["system"] = system
        resp = _boto_call(lambda: client.converse(**kw))
        try:
            return "".join(p.get("text", "") for p in resp["output"]["message"]["content"])
        except (KeyError, TypeError):
            raise ItemFailed(f"{ep.model_id}: reply has no output.message.content") from None

    return lambda msgs, max_tokens=None: _with_retries(lambda: once(msgs, max_tokens), s)


def openai_for(ep: Endpoint, s: Settings, boto_session: Any = None) -> Callable[[Messages], str]:
    return openai_ask(ep.base_url or "", ep.model_id, s, ep.auth)


def sagemaker_for(ep: Endpoint, s: Settings, boto_session: Any = None) -> Callable[[Messages], str]:
    return sagemaker_ask(ep, s, _boto_client("sagemaker-runtime", ep, s, boto_session))


def bedrock_for(ep: Endpoint, s: Settings, boto_session: Any = None) -> Callable[[Messages], str]:
    return bedrock_ask(ep, s, _boto_client("bedrock-runtime", ep, s, boto_session))


def _boto_client(service: str, ep: Endpoint, s: Settings, session: Any) -> Any:
    import boto3
    from botocore.config import Config

    cfg = Config(region_name=ep.region, retries={"mode": "standard", "max_attempts": 1},
                 read_timeout=s.timeout, connect_timeout=15)
    return (session or boto3.Session()).client(service, config=cfg)


def target_for(ep: Endpoint, s: Settings, *, boto_session: Any = None) -> Target:
    """The Target of a discovered (and, for EC2, tunnelled) endpoint: the ask function is the
    protocol's ``accuracy_ask`` entry in harness.protocols (``*_for`` above)."""
    try:
        build = protocols.load(protocols.ready(ep).accuracy_ask)
    except ValueError as e:  # a missing field (tunnel not open) or a protocol the kit does not know
        raise BackendDown(str(e)) from None
    return Target(ep.name, ep.model_id, ep.protocol, build(ep, s, boto_session), ep.label or ep.name,
                  base_url=ep.base_url, auth=ep.auth)
