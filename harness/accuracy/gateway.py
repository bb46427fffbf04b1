"""A local OpenAI-compatible chat endpoint in front of a Target that is not one (SageMaker,
Bedrock), so lm-eval's ``local-chat-completions`` can reach every backend the same way.

Serves ``POST /v1/chat/completions`` (non-streaming) and ``GET /v1/models`` on 127.0.0.1 with a
free port, for the life of a ``with`` block. Each request goes through ``Target.ask`` (greedy,
seeded, the request's ``max_tokens``; lm-eval's ``stop`` list is not forwarded: the Converse and
SageMaker calls of harness.accuracy.client send none). A client error answers 400; a backend that
is down answers 503, which lm-eval retries and then reports.
"""
from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

from harness.accuracy.client import BackendDown, ItemFailed, Target


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON (also the base of the tests' scripted servers)."""

    def log_message(self, *a) -> None:
        pass

    def _send(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def openai_gateway(target: Target) -> Iterator[Target]:
    """The same target, with ``base_url`` pointing at a local gateway while the block runs."""

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": target.model_id, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"{self.path} not served"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"{self.path} not served (chat completions only)"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                msgs = [{"role": m["role"], "content": _text(m.get("content"))} for m in body["messages"]]
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, {"error": {"message": f"bad request: {e}"}})
                return
            mt = body.get("max_tokens") or body.get("max_completion_tokens")
            try:  # the request's token budget (a task's max_gen_toks), else the stage's
                text = target.ask(msgs, max_tokens=mt) if isinstance(mt, int) and mt > 0 else target.ask(msgs)
            except ItemFailed as e:
                self._send(400, {"error": {"message": str(e)}})
                return
            except BackendDown as e:
                self._send(503, {"error": {"message": str(e)}})
                return
            self._send(200, {"id": "gateway", "object": "chat.completion", "model": target.model_id,
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}]})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name=f"gateway-{target.name}", daemon=True)
    thread.start()
    try:
        yield replace(target, base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", completions_echo=False,
                      auth=None)  # the gateway asks through target.ask, which carries the credentials
    finally:
        httpd.shutdown()
        httpd.server_close()
