"""Amazon Bedrock, ``converse_stream`` (boto3).

Each ``contentBlockDelta`` with text is a token-carrying chunk; ``metadata.usage.outputTokens``
is the server's count. Bedrock cannot be told to ignore end-of-sequence, so output lengths are
the model's own (``finish_reason`` holds ``stopReason``). Throttling on the initial call is
retried with backoff and recorded; a throttling event mid-stream fails the request as
``throttled``.
"""
from __future__ import annotations

from typing import Any

from harness.bench.clients.boto import Retry, answered_round_trip, boto_client, call_with_retry, classify, error_code, \
    run_in_thread
from harness.bench.profiles import BenchRequest
from harness.bench.record import Record, now_ns
from harness.endpoint import Endpoint

_ERROR_EVENTS = {"internalServerException": "stream_error", "modelStreamErrorException": "stream_error",
                 "validationException": "stream_error", "throttlingException": "throttled",
                 "serviceUnavailableException": "throttled"}


class BedrockClient:
    protocol = "bedrock"
    # The cheapest bedrock-runtime call: ListAsyncInvokes (GET /async-invoke, botocore's
    # bedrock-runtime service model) runs no model and costs nothing; an AccessDenied answer is
    # a round trip all the same.
    round_trip_how = "ListAsyncInvokes maxResults=1 (no model runs)"

    def __init__(self, model: str, *, region: str | None = None, client: Any = None,
                 read_timeout: float = 600.0, retry: Retry | None = None) -> None:
        self.model = model
        self.region = region
        self.client = client
        self.read_timeout = read_timeout
        self.retry = retry or Retry()

    async def start(self, max_concurrency: int) -> None:
        if self.client is None:
            self.client = boto_client("bedrock-runtime", self.region, max_concurrency,
                                      self.read_timeout)

    async def close(self) -> None:
        pass

    async def round_trip(self) -> None:
        await answered_round_trip(lambda: self.client.list_async_invokes(maxResults=1))

    async def stream(self, request: BenchRequest, record: Record) -> Record:
        kw: dict[str, Any] = {
            "modelId": self.model,
            "messages": [{"role": "user", "content": [{"text": request.prompt}]}],
            "inferenceConfig": {"maxTokens": request.max_tokens, "temperature": 0},
        }
        if request.system:
            kw["system"] = [{"text": request.system}]
        return await run_in_thread(lambda holder: self._blocking(kw, record, holder), record)

    def _blocking(self, kw: dict, record: Record, holder: dict) -> None:
        record.mark_sent()
        resp = call_with_retry(record, lambda: self.client.converse_stream(**kw), self.retry)
        if resp is None:
            record.finish()
            return
        record.http_status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode", 200)
        stream = holder["stream"] = resp["stream"]
        stopped = False
        try:
            for event in stream:
                t = now_ns()
                if record.closed:
                    return
                if "contentBlockDelta" in event:
                    delta = event["contentBlockDelta"].get("delta") or {}
                    text = delta.get("text")
                    if text is None:
                        text = ((delta.get("reasoningContent") or {}).get("text")
                                or (delta.get("toolUse") or {}).get("input") or "")
                    if text:
                        record.add_chunk(t, text)
                elif "messageStop" in event:
                    stopped = True
                    record.finish_reason = event["messageStop"].get("stopReason")
                elif "metadata" in event:
                    usage = event["metadata"].get("usage") or {}
                    if isinstance(usage, dict):  # untrusted counts: Record.note_usage checks
                        record.note_usage(usage.get("outputTokens"), usage.get("inputTokens"))
                else:
                    for key, cls in _ERROR_EVENTS.items():
                        if key in event:
                            record.fail(cls, f"{key}: {(event[key] or {}).get('message', '')}")
                            break
        except Exception as e:  # noqa: BLE001 - recorded on the request, not raised: failures are data
            if record.closed:
                return
            cls, status = classify(e)
            record.fail("dropped" if cls == "client" else cls, f"{error_code(e)}: {e}", status)
        if record.error is None and not stopped:
            record.fail("dropped", "stream ended without messageStop")
        record.finish(ok=record.error is None)


def for_endpoint(endpoint: Endpoint, *, client: Any = None, vllm_extras: bool = True,
                 api_key: str | None = None, request_timeout: float = 600.0) -> BedrockClient:
    """The ``bedrock`` entry of harness.protocols (Converse has no vLLM extras; IAM signs)."""
    return BedrockClient(endpoint.model_id, region=endpoint.region, client=client,
                         read_timeout=request_timeout)
