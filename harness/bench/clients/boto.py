"""What the two boto3 clients share: a client built for load, a blocking call run in its own
daemon thread (the event loop never blocks, and a stuck read can never hold up interpreter
exit), and throttling retries that are recorded, not hidden.

boto3's own retries are switched off (``max_attempts=1``) so that every retry is ours and lands
in the record (``retries``, ``retry_wait_ms``); TTFT and e2e still count from the first attempt,
because that is what a caller waits.
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any, Callable

from harness.bench.record import Record

THROTTLE_CODES = {"ThrottlingException", "throttlingException", "TooManyRequestsException",
                  "ServiceQuotaExceededException", "serviceUnavailableException",
                  "ServiceUnavailableException", "ServiceUnavailable"}


def boto_client(service: str, region: str | None, max_concurrency: int, read_timeout: float):
    import boto3
    from botocore.config import Config
    cfg = Config(region_name=region, retries={"mode": "standard", "max_attempts": 1},
                 max_pool_connections=max(10, max_concurrency + 4),
                 read_timeout=read_timeout, connect_timeout=15, tcp_keepalive=True)
    return boto3.client(service, config=cfg)


def error_code(exc: BaseException) -> str:
    resp = getattr(exc, "response", None) or {}
    return str((resp.get("Error") or {}).get("Code") or type(exc).__name__)


def classify(exc: BaseException) -> tuple[str, int | None]:
    """(error class, HTTP status) of a botocore exception."""
    from botocore import exceptions as bex
    if isinstance(exc, bex.EventStreamError):  # an exception event in the middle of a stream
        code = error_code(exc)
        return ("throttled" if code in THROTTLE_CODES else "stream_error"), None
    if isinstance(exc, bex.ClientError):
        code = error_code(exc)
        meta = exc.response.get("ResponseMetadata") or {}
        status = meta.get("HTTPStatusCode")
        if code in THROTTLE_CODES or status == 429:
            return "throttled", status
        orig = exc.response.get("OriginalStatusCode")  # SageMaker ModelError: the container's status
        if orig:
            return f"http_{orig}", int(orig)
        return (f"http_{status}" if status else "client"), status
    if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError)):
        return "connect", None
    if isinstance(exc, bex.ReadTimeoutError):
        return "timeout", None
    if isinstance(exc, (bex.ResponseStreamingError, bex.IncompleteReadError,
                        ConnectionError)):
        return "dropped", None
    return "client", None


class Retry:
    """Exponential backoff with full jitter for throttling before the first token."""

    def __init__(self, max_retries: int = 4, base_s: float = 0.25, cap_s: float = 8.0) -> None:
        self.max_retries, self.base_s, self.cap_s = max_retries, base_s, cap_s

    def wait(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap_s, self.base_s * 2 ** attempt))


async def run_in_thread(fn: Callable[[dict], None], record: Record) -> Record:
    """Run ``fn(holder)`` in a daemon thread; on cancellation close whatever stream ``fn`` put in
    ``holder['stream']`` so the thread's blocking read returns."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()
    holder: dict[str, Any] = {}

    def done(exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(exc) if exc else fut.set_result(None)

    def target() -> None:
        exc = None
        try:
            fn(holder)
        except BaseException as e:  # noqa: BLE001 - reported to the awaiting coroutine
            exc = e
        try:
            loop.call_soon_threadsafe(done, exc)
        except RuntimeError:  # loop already closed: the run is over
            pass

    threading.Thread(target=target, daemon=True, name=f"bench-{record.id}").start()
    try:
        await fut
    except asyncio.CancelledError:
        record.finish()
        stream = holder.get("stream")
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a broken stream must not hide the error being raised
                pass
        raise
    return record


def call_with_retry(record: Record, call: Callable[[], Any], retry: Retry) -> Any | None:
    """The initial API call, retried on throttling; None when it failed (record says why)."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - classified and recorded or retried, not raised
            cls, status = classify(e)
            if cls == "throttled" and attempt < retry.max_retries and not record.closed:
                w = retry.wait(attempt)
                record.retries += 1
                record.retry_wait_ms += w * 1000
                time.sleep(w)
                attempt += 1
                continue
            record.fail(cls, f"{error_code(e)}: {e}", status)
            return None


async def answered_round_trip(call: Callable[[], Any]) -> None:
    """Run a boto3 call made only to time the path (harness.bench.path) in a thread: an error the
    service answers with (4xx) is a completed round trip; no answer (connection, timeout) raises."""
    from botocore.exceptions import ClientError

    def target() -> None:
        try:
            call()
        except ClientError:
            pass

    await asyncio.to_thread(target)
