"""Scripted local OpenAI-compatible servers for the accuracy tests.

A ``Script`` maps the user message of a chat request to the reply text. The server records every
request body in order, can stop answering after ``die_after`` replies (it closes its listening
socket and every later connection is refused), and optionally serves ``/v1/completions`` with
echo (prompt logprobs) for log-likelihood tasks.
"""
from __future__ import annotations

import json
import re
import threading
from http.server import ThreadingHTTPServer
from typing import Callable

from harness.accuracy.gateway import JsonHandler

WORDS = re.compile(r"\w+|[^\w\s]+")  # as the tokenizers library's Whitespace pre-tokenizer splits
Script = Callable[[str], "str | int"]  # reply text, or an HTTP error status to answer with


def numbered(right: set[int], *, style: str = "line") -> Script:
    """Questions 'Q<i>: what is <i> plus <i>?' (answer 2i): right for i in ``right``, else 2i+1."""

    def reply(text: str) -> str:
        m = re.search(r"Q(\d+):", text)
        if m is None:  # not an item (lm-eval's one-token probe of the chat endpoint)
            return "OK"
        i = int(m.group(1))
        ans = 2 * i if i in right else 2 * i + 1
        if style == "line":
            return f"Adding {i} and {i} step by step.\nAnswer: {ans}"
        return f"So {i} + {i} gives {ans:,}."  # no Answer line: the last number is taken

    return reply


class ScriptedServer:
    def __init__(self, script: Script, *, model: str = "scripted-model", die_after: int | None = None,
                 echo_logprobs: "bool | Callable[[list[str]], float]" = False,
                 refuse: tuple[str, ...] = ()) -> None:
        self.script = script
        self.model = model
        self.die_after = die_after
        self.echo_logprobs = echo_logprobs
        self.refuse = refuse  # request fields answered with a 400, as the kit's Neuron engine does
        self.bodies: list[dict] = []
        self.answered = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(JsonHandler):
            def do_GET(self):  # noqa: N802
                if self.path.rstrip("/").endswith("/v1/models"):
                    self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with outer.lock:
                    if outer.die_after is not None and outer.answered >= outer.die_after:
                        dead = True
                    else:
                        dead = False
                        outer.bodies.append({"path": self.path, **body})
                if dead:
                    outer._die()
                    self.close_connection = True
                    return  # the connection closes with no reply
                refused = [f for f in outer.refuse if body.get(f) not in (None, False, 0, [])]
                if refused:
                    self._send(400, {"error": {"message": f"{refused[0]} is not supported", "param": refused[0]}})
                    return
                if self.path.endswith("/chat/completions"):
                    msgs = body["messages"]
                    user = [m for m in msgs if m["role"] == "user"][-1]["content"]
                    if isinstance(user, list):
                        user = " ".join(p.get("text", "") for p in user)
                    text = outer.script(user)
                    if isinstance(text, int):
                        self._send(text, {"error": {"message": f"scripted {text}"}})
                        return
                    with outer.lock:
                        outer.answered += 1
                    self._send(200, {"id": "x", "object": "chat.completion", "model": outer.model,
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": text}}],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
                elif self.path.endswith("/completions") and outer.echo_logprobs and body.get("echo"):
                    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
                    choices = []
                    for i, p in enumerate(prompts):
                        toks = WORDS.findall(str(p))
                        lps = [-1.0] * len(toks)
                        if callable(outer.echo_logprobs):  # the last prompt token's logprob
                            lps[-1] = outer.echo_logprobs(toks)
                        toks, lps = toks + ["x"], [None] + lps[1:] + [-1.0]  # max_tokens 1: one more
                        choices.append({"index": i, "text": " ".join(toks), "logprobs": {
                            "tokens": toks, "token_logprobs": lps,
                            "top_logprobs": [None] + [{t: lp} for t, lp in zip(toks[1:], lps[1:])]}})
                    self._send(200, {"id": "x", "object": "text_completion", "model": outer.model,
                                     "choices": choices})
                else:
                    self._send(404, {"error": {"message": f"{self.path} not served"}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self._dead = False

    def _die(self) -> None:
        with self.lock:
            if self._dead:
                return
            self._dead = True
        threading.Thread(target=self.stop, daemon=True).start()

    def questions(self) -> list[str]:
        """The item questions asked, in order (other chat requests, such as probes, left out)."""
        out = []
        for b in self.bodies:
            if "messages" in b:
                q = [m for m in b["messages"] if m["role"] == "user"][-1]["content"]
                if isinstance(q, str) and re.match(r"Q\d+:", q):
                    out.append(q)
        return out

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
