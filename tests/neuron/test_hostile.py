"""Hostile input against the Neuron engine, over raw sockets on loopback.

Every refusal is an OpenAI-style JSON error (``{"error": {"message", "type", "param", "code"}}``)
with a 4xx status naming the field; nothing is a 500, nothing blocks ``/health`` for a second,
nothing is silently misread, trickling connections are dropped, and the log stays small.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import resource
import socket
import struct
import threading
import time

import pytest

from ami.neuron.chat import ChatFormat
from ami.neuron.generator import BatchedGenerator, Limits

from .conftest import InProcessServer
from .engine_proc import tiny_engine
from .fake_slots import FakeSlotRunner

MODEL = "tiny"
HELLO = [{"role": "user", "content": "hi"}]


def QuickRunner() -> FakeSlotRunner:  # noqa: N802 - a factory named as the class it stands in for
    """Token 40 for every row until its budget is spent (no model)."""
    return FakeSlotRunner(slots=4)


def EndlessRunner() -> FakeSlotRunner:  # noqa: N802 - a factory named as the class it stands in for
    """Token 40 every 5 ms; ``started`` at the first decode step, ``released`` when a slot frees."""
    return FakeSlotRunner(slots=4, step_s=0.005)


def generator(tokenizer, runner=None) -> BatchedGenerator:
    return BatchedGenerator(MODEL, ChatFormat.for_tokenizer(tokenizer), Limits(256, 512, 4),
                            runner or QuickRunner())


@pytest.fixture(scope="module")
def server(tiny_tokenizer):
    with InProcessServer(generator(tiny_tokenizer)) as srv:
        yield srv


# ---------------------------------------------------------------------------------------------
# Raw HTTP over a socket: nothing between the test and the server's parser.
# ---------------------------------------------------------------------------------------------

def http(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None,
         timeout: float = 60) -> tuple[int, dict, bytes]:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
            f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early (e.g. 413) and stopped reading; read what it said
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    raw = b"".join(chunks)
    top, _, payload = raw.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return status, hdrs, payload


def post(port: int, body, content_type: str = "application/json", **kw) -> tuple[int, dict, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http(port, "POST", "/v1/chat/completions", data, {"Content-Type": content_type}, **kw)


def chat(**fields) -> dict:
    return {"model": MODEL, "messages": HELLO, "max_tokens": 2, **fields}


def openai_error(status: int, hdrs: dict, payload: bytes) -> dict:
    """The body of an OpenAI-style JSON error, checked for shape."""
    assert 400 <= status < 500, (status, payload[:300])
    assert hdrs.get("content-type", "").startswith("application/json"), (hdrs, payload[:300])
    err = json.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert len(err["message"]) < 1000, "an error message must not echo the attack back"
    return err


def logged(caplog, match, timeout: float = 10.0, settle: float = 0.3) -> None:
    """Wait until a record ``match`` accepts is in caplog (the server logs from its own thread,
    later on a busy machine), then ``settle`` more seconds for anything it would log after it."""
    deadline = time.monotonic() + timeout
    while not any(match(r) for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(settle)


def health_ms(port: int) -> float:
    t0 = time.monotonic()
    status, _, body = http(port, "GET", "/health", timeout=5)
    assert status == 200 and json.loads(body)["status"] == "ok"
    return (time.monotonic() - t0) * 1000


# ---------------------------------------------------------------------------------------------
# Point 4: malformed-but-parseable requests are 4xx JSON naming the field, never a 500.
# ---------------------------------------------------------------------------------------------

CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}

MALFORMED = [
    # (case, raw body or JSON object, content type, status, param)
    ("json nested 5000 deep", b'{"model": "tiny", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     "application/json", 400, None),
    ("arguments nested 1500 deep",  # a JSON string inside the JSON: small, but too deep to parse
     chat(messages=[{**CALL, "tool_calls": [{"id": "c1", "type": "function", "function": {
         "name": "f", "arguments": '{"a":' + "[" * 1500 + "]" * 1500 + "}"}}]}, {"role": "user", "content": "x"}]),
     "application/json", 400, "messages[0].tool_calls[0].function.arguments"),
    ("arguments nested 100 deep, over the 64-level limit",
     chat(messages=[{**CALL, "tool_calls": [{"id": "c1", "type": "function", "function": {
         "name": "f", "arguments": '{"a":' + "[" * 100 + "]" * 100 + "}"}}]}, {"role": "user", "content": "x"}]),
     "application/json", 400, "messages[0].tool_calls[0].function.arguments"),
    ("tool parameters nested 200 deep, over the 64-level limit",
     chat(tools=[{"type": "function", "function": {"name": "f", "parameters": json.loads(
         '{"a":' * 200 + "1" + "}" * 200)}}]),
     "application/json", 400, "tools"),
    ("tool_call_id is a list", chat(messages=[CALL, {"role": "tool", "tool_call_id": ["c1"], "content": "8"}]),
     "application/json", 400, "messages[1].tool_call_id"),
    ("tool_call_id is an object", chat(messages=[CALL, {"role": "tool", "tool_call_id": {"a": 1}, "content": "8"}]),
     "application/json", 400, "messages[1].tool_call_id"),
    ("tool_calls[].id is a list",
     chat(messages=[{**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": ["c1"]}]},
                    {"role": "user", "content": "x"}]),
     "application/json", 400, "messages[0].tool_calls[0].id"),
    ("tool_calls[].id is an object",
     chat(messages=[{**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": {"x": 1}}]},
                    {"role": "user", "content": "x"}]),
     "application/json", 400, "messages[0].tool_calls[0].id"),
    ("tool name is a list", chat(messages=[CALL, {"role": "tool", "name": ["f"], "content": "8"}]),
     "application/json", 400, "messages[1].name"),
    ("tool description is a list", chat(tools=[{"type": "function", "function": {"name": "f", "description": ["x"]}}]),
     "application/json", 400, "tools"),
    ('stream: "false"', chat(stream="false"), "application/json", 400, "stream"),
    ('stream: 0', chat(stream=0), "application/json", 400, "stream"),
    ('ignore_eos: "false"', chat(ignore_eos="false"), "application/json", 400, "ignore_eos"),
    ("n: true", chat(n=True), "application/json", 400, "n"),
    ("n: 1.0", chat(n=1.0), "application/json", 400, "n"),
    ('include_usage: "yes"', chat(stream=True, stream_options={"include_usage": "yes"}),
     "application/json", 400, "stream_options.include_usage"),
    ("body is not UTF-8", b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
     "application/json", 400, None),
    ("body is a list", b"[1, 2]", "application/json", 400, None),
    ("model is 100 kB", chat(model="m" * 100_000), "application/json", 404, "model"),
    ("an integer of 5000 digits", b'{"model": "tiny", "max_tokens": ' + b"7" * 5000 + b"}",
     "application/json", 400, None),
    ("NaN temperature", b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
     "application/json", 400, "temperature"),
    ("a lone surrogate", b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
     "application/json", 400, "messages"),
]


@pytest.mark.parametrize("case, body, ctype, status, param", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_requests_are_4xx_json_naming_the_field(server, case, body, ctype, status, param):
    got, hdrs, payload = post(server.port, body, ctype)
    assert got == status, (case, payload[:300])
    err = openai_error(got, hdrs, payload)
    assert err["param"] == param, err


def test_a_charset_parameter_is_ignored_as_rfc_8259_says(server):
    # RFC 8259 section 11: no "charset" parameter is defined for application/json; adding one
    # has no effect on compliant recipients. The body is read as UTF-8 whatever it names.
    for ctype in ("application/json; charset=foo", "application/json; charset=latin-1"):
        status, _, payload = post(server.port, chat(messages=[{"role": "user", "content": "é"}]), ctype)
        assert status == 200, (ctype, payload[:300])
        assert json.loads(payload)["usage"]["completion_tokens"] == 2


def test_stream_false_as_a_bool_still_answers_whole(server):
    status, hdrs, payload = post(server.port, chat(stream=False, ignore_eos=False, n=1))
    assert status == 200 and hdrs["content-type"].startswith("application/json")
    assert json.loads(payload)["object"] == "chat.completion"


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/nope", 404), ("POST", "/v1/embeddings", 404), ("GET", "/v1/chat/completions", 405),
    ("GET", "/v1/completions", 405),
    ("DELETE", "/health", 405),
])
def test_404_and_405_are_openai_json(server, method, path, status):
    got, hdrs, payload = http(server.port, method, path)
    assert got == status
    err = openai_error(got, hdrs, payload)
    assert path in err["message"] or method in err["message"]


def test_413_is_openai_json_naming_the_limit(server):
    # 256 prompt tokens x 16 characters (the tiny vocabulary's longest entry) = 4096 characters;
    # at 12 bytes per character at most, plus structure: 147456 bytes.
    big = b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"a" * 150_000 + b'"}]}'
    status, hdrs, payload = post(server.port, big)
    assert status == 413
    err = openai_error(status, hdrs, payload)
    assert "147456 bytes" in err["message"] and err["code"] == "body_too_large"


def test_a_content_length_over_the_limit_is_refused_before_the_body_is_sent(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000000000000\r\n\r\n{")
        reply = s.recv(65536)
    assert int(reply.split()[1]) == 413
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "body_too_large"


def test_a_body_that_stops_arriving_is_a_408(tiny_tokenizer):
    from ami.neuron.server import build_app
    gen = generator(tiny_tokenizer)
    srv = InProcessServer(gen)
    srv.app = build_app(gen, "scripted", body_timeout=1.0)
    with srv, socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"model\":")
        t0 = time.monotonic()
        reply = s.recv(65536)
        assert time.monotonic() - t0 < 5
    status = int(reply.split()[1])
    assert status == 408
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "body_timeout"


def test_a_client_that_leaves_mid_stream_logs_one_line_not_a_traceback(tiny_tokenizer, caplog):
    runner = EndlessRunner()
    gc.collect()  # earlier tests' stopped loops report their leftover tasks now, not below
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    with InProcessServer(generator(tiny_tokenizer, runner)) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            body = json.dumps(chat(stream=True, ignore_eos=True, max_tokens=None)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            got = b""
            while got.count(b"data: ") < 3:  # the role chunk, then tokens: the row is decoding
                chunk = s.recv(4096)
                assert chunk, got
                got += chunk
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        assert runner.released.wait(10), "row still decoding after the client left"
        logged(caplog, lambda r: "client" in r.getMessage() and r.name.startswith("ami."))
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [(r.name, r.levelname, r.getMessage()[:200]) for r in loud]
    said = [r for r in caplog.records if "client" in r.getMessage() and r.name.startswith("ami.")]
    assert len(said) == 1 and said[0].levelno in (logging.INFO, logging.DEBUG)


def test_a_client_that_leaves_before_a_whole_answer_frees_its_row(tiny_tokenizer):
    runner = EndlessRunner()
    with InProcessServer(generator(tiny_tokenizer, runner)) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            body = json.dumps(chat(ignore_eos=True, max_tokens=None)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            assert runner.started.wait(5)  # decoding; the answer would come when the budget is spent
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert runner.released.wait(5), "row still decoding for a client that left"


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\r\nX-Long: " + b"a" * 10_000 + b"\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
], ids=["bad request line", "header over 8190 bytes", "bad Content-Length"])
def test_broken_http_is_a_400_and_one_info_line(server, caplog, raw):
    gc.collect()
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(raw)
        reply = s.recv(65536)
    logged(caplog, lambda r: r.name == "ami.neuron.http", settle=0.2)
    assert int(reply.split()[1]) == 400
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [(r.name, r.levelname, r.getMessage()[:200]) for r in loud]
    said = [r for r in caplog.records if r.name == "ami.neuron.http"]  # INFO, or DEBUG for a non-HTTP method
    assert len(said) == 1 and len(said[0].getMessage()) < 500, [r.getMessage()[:200] for r in said]


# ---------------------------------------------------------------------------------------------
# Point 3: a huge prompt is refused by cheap limits, and /health answers within 1 s meanwhile.
# ---------------------------------------------------------------------------------------------

def _big_prompt(model: str) -> bytes:
    text = "word " * 3_000_000  # 15 MB
    return json.dumps(chat(model=model, messages=[{"role": "user", "content": text}])).encode()


def _many_messages(model: str) -> bytes:
    return json.dumps(chat(model=model, messages=[{"role": "user", "content": "hi"}] * 200_000)).encode()


def _many_tools(model: str) -> bytes:
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "does a thing",
                                               "parameters": {"type": "object", "properties": {}}}}
             for i in range(30_000)]
    return json.dumps(chat(model=model, tools=tools)).encode()


# Each is far over the largest body a request fitting 256 prompt tokens can take: refused by size,
# before a byte of it is parsed.
ATTACKS = [("15 MB prompt", _big_prompt, "body_too_large"), ("200k messages", _many_messages, "body_too_large"),
           ("30k tools", _many_tools, "body_too_large")]


@pytest.mark.parametrize("case, build, code", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_big_prompt_attack_is_refused_while_health_answers_within_1s(tiny_server, case, build, code):
    """Against the real CLI in its own process (the tiny model, prompts up to 256 tokens)."""
    port = int(tiny_server.rsplit(":", 1)[1])
    body = build("tiny-random-gemma4")
    result: dict = {}

    def attack():
        result["reply"] = post(port, body, timeout=120)

    t = threading.Thread(target=attack)
    t.start()
    latencies = []
    while t.is_alive():
        try:
            latencies.append(health_ms(port))
        except OSError as exc:  # a /health that does not answer in 5 s
            latencies.append(float("inf"))
            result.setdefault("health_error", repr(exc))
        time.sleep(0.05)
    t.join()
    err = openai_error(*result["reply"])
    assert err["code"] == code, err
    assert max(latencies, default=0) < 1000, (case, sorted(latencies)[-3:], result.get("health_error"))
    assert health_ms(port) < 1000


@pytest.mark.parametrize("fields, param, code, says", [
    ({"messages": [{"role": "user", "content": "hi"}] * 300}, "messages", "too_many_messages", "300 entries"),
    ({"tools": [{"type": "function", "function": {"name": f"t{i}"}} for i in range(300)]}, "tools",
     "too_many_tools", "300 entries"),
    ({"messages": [{"role": "user", "content": "x" * 5000}]}, "messages", "prompt_too_long", "4096 characters"),
    ({"messages": [{"role": "user", "content": "x"}] * 100 + [{"role": "user", "content": "y" * 4000}]},
     "messages", "prompt_too_long", "4096 characters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": "d" * 4100}}]}, "tools",
     "prompt_too_long", "4096 characters"),
])
def test_cheap_limits_are_named_in_the_refusal(server, fields, param, code, says):
    status, hdrs, payload = post(server.port, chat(**fields))
    err = openai_error(status, hdrs, payload)
    assert (err["param"], err["code"]) == (param, code) and says in err["message"], err
    assert "256" in err["message"], err


def test_a_prompt_just_under_the_character_limit_still_reaches_the_tokenizer(server):
    # The cheap limit refuses only what cannot fit: this one is refused by the token count.
    status, hdrs, payload = post(server.port, chat(messages=[{"role": "user", "content": "word " * 400}]))
    err = openai_error(status, hdrs, payload)
    assert err["code"] == "prompt_too_long" and "tokens" in err["message"], err


# ---------------------------------------------------------------------------------------------
# Slowloris: trickling connections are closed after the header timeout; the log stays small.
# ---------------------------------------------------------------------------------------------

def _limit_fds():  # runs in the server's child process before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_trickling_connections_cannot_make_the_engine_unresponsive(tmp_path):
    with open(tmp_path / "stderr.log", "wb+") as log, \
            tiny_engine("--cpu-threads", "1", "--header-timeout", "1", stderr=log, preexec_fn=_limit_fds) as (port, proc):
        socks: list[socket.socket] = []
        try:
            assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-2000:]
            before = os.path.getsize(tmp_path / "stderr.log")
            t0 = time.monotonic()
            for _ in range(300):  # more than the server's 256 descriptors
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.setblocking(False)
                s.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            stop = threading.Event()

            def trickle():
                while not stop.is_set():
                    for s in socks:
                        try:
                            s.send(b"X")
                        except OSError:
                            pass
                    time.sleep(0.2)

            th = threading.Thread(target=trickle, daemon=True)
            th.start()
            answered = None
            while time.monotonic() - t0 < 15 and answered is None:
                try:
                    answered = health_ms(port)
                except (OSError, ValueError, IndexError):
                    time.sleep(0.1)
            waited = time.monotonic() - t0
            stop.set()
            th.join()
            assert answered is not None and waited < 6, f"/health unanswered for {waited:.1f} s under 300 trickling connections"
            assert os.path.getsize(tmp_path / "stderr.log") - before < 50_000
        finally:
            for s in socks:
                s.close()


def test_log_lines_are_bounded_and_rate_limited():
    import io

    from ami.neuron import logs

    out = io.StringIO()
    handler = logs.handler(out)
    logger = logging.getLogger("ami.neuron.test-flood")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        for i in range(20_000):
            logger.error("accept failed on socket %d", i)
        logger.error("huge %s", "x" * 10_000_000)
        try:
            raise ValueError("y" * 10_000_000)
        except ValueError:
            logger.exception("with a traceback")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert len(text) < 100_000, len(text)
    assert "accept failed on socket 0" in text and "suppressed" in text
    assert "with a traceback" in text
