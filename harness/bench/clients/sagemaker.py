"""SageMaker real-time endpoint, ``invoke_endpoint_with_response_stream`` (boto3).

The body is the OpenAI chat body (the SageMaker vLLM container serves it on /invocations). The
payload parts carry the container's SSE lines, which may be split across parts or come several
to a part: they go through the same parser as the direct OpenAI client, timestamped per part.
"""
from __future__ import annotations

from typing import Any

try:
    from orjson import dumps
except ImportError:  # pragma: no cover
    import json

    def dumps(o):  # type: ignore[no-redef]
        return json.dumps(o).encode()

from harness.bench.clients.body import chat_body
from harness.bench.clients.boto import Retry, answered_round_trip, boto_client, call_with_retry, classify, \
    error_code, run_in_thread
from harness.bench.profiles import BenchRequest
from harness.bench.record import Record, now_ns
from harness.bench.sse import OpenAIStreamParser
from harness.endpoint import Endpoint


# An endpoint name that cannot exist in the account (names are at most 63 characters of
# [a-zA-Z0-9-]): sagemaker-runtime has no operation that does not run a model (InvokeEndpoint,
# InvokeEndpointAsync, InvokeEndpointWithResponseStream: botocore's sagemaker-runtime service
# model), so the path probe asks the same regional runtime host for this one and times its
# ValidationError answer. It measures the way to the runtime front end, not SageMaker's own
# router-to-instance hop, which stays in "server" TTFT.
PROBE_ENDPOINT = "inference-kit-path-probe-none"


class SageMakerClient:
    protocol = "sagemaker"
    round_trip_how = f"InvokeEndpoint on the absent endpoint {PROBE_ENDPOINT} (ValidationError answer)"

    def __init__(self, endpoint_name: str, model: str, *, region: str | None = None,
                 client: Any = None, vllm_extras: bool = True, read_timeout: float = 600.0,
                 retry: Retry | None = None, inference_component: str | None = None) -> None:
        self.endpoint_name = endpoint_name
        self.model = model
        self.region = region
        self.client = client
        self.vllm_extras = vllm_extras
        self.read_timeout = read_timeout
        self.retry = retry or Retry()
        self.inference_component = inference_component

    async def start(self, max_concurrency: int) -> None:
        if self.client is None:
            self.client = boto_client("sagemaker-runtime", self.region, max_concurrency,
                                      self.read_timeout)

    async def close(self) -> None:
        pass

    async def round_trip(self) -> None:
        await answered_round_trip(lambda: self.client.invoke_endpoint(
            EndpointName=PROBE_ENDPOINT, Body=b"{}", ContentType="application/json"))

    async def stream(self, request: BenchRequest, record: Record) -> Record:
        body = dumps(chat_body(request, self.model, vllm_extras=self.vllm_extras))
        return await run_in_thread(lambda holder: self._blocking(body, record, holder), record)

    def _blocking(self, body: bytes, record: Record, holder: dict) -> None:
        kw: dict[str, Any] = {"EndpointName": self.endpoint_name, "Body": body,
                              "ContentType": "application/json"}
        if self.inference_component:
            kw["InferenceComponentName"] = self.inference_component
        record.mark_sent()
        resp = call_with_retry(record, lambda: self.client.invoke_endpoint_with_response_stream(**kw),
                               self.retry)
        if resp is None:
            record.finish()
            return
        record.http_status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode", 200)
        stream = holder["stream"] = resp["Body"]
        parser = OpenAIStreamParser(record)
        try:
            for event in stream:
                t = now_ns()
                if record.closed:
                    return
                part = event.get("PayloadPart")
                if part is not None:
                    parser.feed(part.get("Bytes") or b"", t)
                elif "ModelStreamError" in event or "InternalStreamFailure" in event:
                    err = event.get("ModelStreamError") or event.get("InternalStreamFailure") or {}
                    record.fail("stream_error", str(err.get("Message") or err))
                    break
            parser.close(now_ns())
        except Exception as e:  # noqa: BLE001 - recorded on the request, not raised: failures are data
            if record.closed:
                return
            cls, status = classify(e)
            record.fail("dropped" if cls == "client" else cls, f"{error_code(e)}: {e}", status)
        if record.error is None and not parser.complete():
            record.fail("dropped", "stream ended without finish_reason or [DONE]")
        record.finish(ok=record.error is None)


def for_endpoint(endpoint: Endpoint, *, client: Any = None, vllm_extras: bool = True,
                 api_key: str | None = None, request_timeout: float = 600.0) -> SageMakerClient:
    """The ``sagemaker`` entry of harness.protocols (IAM signs the calls: no ``api_key``)."""
    return SageMakerClient(endpoint.endpoint_name or "", endpoint.model_id, region=endpoint.region,
                           client=client, vllm_extras=vllm_extras, read_timeout=request_timeout)
