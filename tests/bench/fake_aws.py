"""Fake boto3 clients whose streaming responses are real botocore ``EventStream`` objects.

botocore's Stubber cannot return event streams, so these clients encode each event in the AWS
event-stream binary format (prelude, headers, payload, CRC32s) and hand the bytes to botocore's
own ``EventStream`` with the service model's real output shape and parser: the backend under test
iterates exactly what boto3 would give it, including exception events raised mid-stream.
"""
from __future__ import annotations

import binascii
import json
import struct
import threading
import time
from typing import Any

import boto3
from botocore.eventstream import EventStream
from botocore.exceptions import ClientError
from botocore.parsers import EventStreamJSONParser


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + b"\x07" + struct.pack("!H", len(v)) + v


def encode_event(event_type: str, payload: bytes, *, exception: bool = False) -> bytes:
    headers = (_header(":message-type", "exception") + _header(":exception-type", event_type)
               if exception else
               _header(":message-type", "event") + _header(":event-type", event_type))
    headers += _header(":content-type", "application/json")
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(headers))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    msg = prelude + headers + payload
    return msg + struct.pack("!I", binascii.crc32(msg) & 0xFFFFFFFF)


class RawStream:
    """What botocore reads: ``stream()`` yields byte chunks (here one per event, after a delay).

    The fake's own record, like the reference server's: ``t_call_ns`` when the API was called and
    ``sent_ns[i]`` when event ``i`` was handed over (``time.perf_counter_ns``, the bench's clock),
    and ``thread``, the calling thread's name (the boto clients name it after the request id).
    botocore pulls events in the caller's thread, so the caller holds event ``i`` from
    ``sent_ns[i]`` until it asks for the next one, which is stamped ``sent_ns[i + 1]``."""

    def __init__(self, items: list[tuple[float, bytes]]) -> None:
        self.items = items
        self.closed = False
        self.thread = threading.current_thread().name
        self.t_call_ns = time.perf_counter_ns()
        self.sent_ns: list[int] = []

    def stream(self):
        for delay, data in self.items:
            if self.closed:
                return
            if delay:
                time.sleep(delay)
            self.sent_ns.append(time.perf_counter_ns())
            yield data

    def close(self) -> None:
        self.closed = True


def _throttle(op: str) -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                        "ResponseMetadata": {"HTTPStatusCode": 429}}, op)


class FakeBedrock:
    """``converse_stream`` answering with ``chunks`` text deltas ``gap`` s apart after ``ttft``."""

    def __init__(self, chunks: list[str], *, ttft: float = 0.02, gap: float = 0.005,
                 output_tokens: int | None = None, throttle_first: int = 0,
                 fail_mid_stream: str | None = None, stop: bool = True) -> None:
        real = boto3.client("bedrock-runtime", region_name="us-east-1")
        self.shape = real.meta.service_model.operation_model("ConverseStream").output_shape.members["stream"]
        self.chunks, self.ttft, self.gap = chunks, ttft, gap
        self.output_tokens = output_tokens
        self.throttle_first = throttle_first
        self.fail_mid_stream = fail_mid_stream
        self.stop = stop
        self.calls: list[dict] = []
        self.streams: list[RawStream] = []

    def converse_stream(self, **kw: Any) -> dict:
        self.calls.append(kw)
        if len(self.calls) <= self.throttle_first:
            raise _throttle("ConverseStream")
        j = lambda o: json.dumps(o).encode()  # noqa: E731
        items = [(0.0, encode_event("messageStart", j({"role": "assistant"})))]
        for i, text in enumerate(self.chunks):
            if self.fail_mid_stream and i == len(self.chunks) // 2:
                items.append((self.gap, encode_event(self.fail_mid_stream, j({"message": "boom"}),
                                                     exception=True)))
                break
            items.append((self.ttft if i == 0 else self.gap, encode_event(
                "contentBlockDelta", j({"contentBlockIndex": 0, "delta": {"text": text}}))))
        else:
            items.append((0.0, encode_event("contentBlockStop", j({"contentBlockIndex": 0}))))
            if self.stop:
                items.append((0.0, encode_event("messageStop", j({"stopReason": "max_tokens"}))))
                usage = {"inputTokens": 11, "outputTokens": self.output_tokens or len(self.chunks),
                         "totalTokens": 11 + (self.output_tokens or len(self.chunks))}
                items.append((0.0, encode_event("metadata", j({"usage": usage, "metrics": {"latencyMs": 5}}))))
        raw = RawStream(items)
        self.streams.append(raw)
        stream = EventStream(raw, self.shape, EventStreamJSONParser(), "ConverseStream")
        return {"ResponseMetadata": {"HTTPStatusCode": 200}, "stream": stream}


class FakeSageMaker:
    """``invoke_endpoint_with_response_stream`` whose payload parts carry ``parts`` (raw bytes of
    the container's SSE output, split wherever the test wants)."""

    def __init__(self, parts: list[bytes], *, ttft: float = 0.02, gap: float = 0.005,
                 model_error: int | None = None, stream_error_at: int | None = None) -> None:
        real = boto3.client("sagemaker-runtime", region_name="us-east-1")
        op = real.meta.service_model.operation_model("InvokeEndpointWithResponseStream")
        self.shape = op.output_shape.members["Body"]
        self.parts, self.ttft, self.gap = parts, ttft, gap
        self.model_error = model_error
        self.stream_error_at = stream_error_at
        self.calls: list[dict] = []
        self.streams: list[RawStream] = []

    def invoke_endpoint_with_response_stream(self, **kw: Any) -> dict:
        self.calls.append(kw)
        if self.model_error:
            raise ClientError({"Error": {"Code": "ModelError", "Message": "container said no"},
                               "OriginalStatusCode": self.model_error,
                               "ResponseMetadata": {"HTTPStatusCode": 424}},
                              "InvokeEndpointWithResponseStream")
        items = []
        for i, part in enumerate(self.parts):
            if self.stream_error_at == i:
                items.append((self.gap, encode_event(
                    "ModelStreamError", json.dumps({"Message": "model crashed", "ErrorCode": "X"}).encode(),
                    exception=True)))
                break
            items.append((self.ttft if i == 0 else self.gap, encode_event("PayloadPart", part)))
        raw = RawStream(items)
        self.streams.append(raw)
        stream = EventStream(raw, self.shape, EventStreamJSONParser(), "InvokeEndpointWithResponseStream")
        return {"ResponseMetadata": {"HTTPStatusCode": 200}, "Body": stream,
                "ContentType": "text/event-stream"}
