"""The SSH forwarder in its own process, against a real OpenSSH server on loopback."""
from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from harness.access import tunnel as access
from harness.access.child import key_from_pem
from harness.access.process import ProcessForward, child_env, key_to_pem
from tests.conftest import require_binary
from tests.harness.servers import get_json, http_server, sshd


class _Proxy:
    """A TCP proxy whose connections the test can cut (as EIC does at the tunnel's end) and whose
    target the test can change (another sshd, another host key)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.conns: list[socket.socket] = []
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                c, _ = self.srv.accept()
                u = socket.create_connection(("127.0.0.1", self.target))
                self.conns += [c, u]
                for a, b in ((c, u), (u, c)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        for s in self.conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.conns.clear()

    def close(self) -> None:
        self.cut()
        self.srv.close()


def test_key_round_trips_through_pem(key):
    import paramiko
    again = key_from_pem(key_to_pem(key))
    assert (again.get_name(), again.get_base64()) == (key.get_name(), key.get_base64())
    sig = again.sign_ssh_data(b"x")  # the private half came across too
    public = paramiko.Ed25519Key(data=key.asbytes())
    assert public.verify_ssh_sig(b"x", paramiko.Message(sig.asbytes()))


def test_child_environment_has_no_aws_settings(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_PROFILE", "p")
    monkeypatch.setenv("KIT_OTHER", "1")
    env = child_env()
    assert not any(k.startswith("AWS_") for k in env) and env["KIT_OTHER"] == "1"


def test_forwarder_runs_in_its_own_process_and_leaves_none_behind(ssh_server, key):
    tickets = []

    def ticket():
        tickets.append(1)
        return {"key": key, "tcp": ("127.0.0.1", ssh_server["port"])}

    pins = access.HostKeyPins()
    with http_server() as http_port:
        with ProcessForward(ticket, username=ssh_server["user"], remote_port=http_port,
                            host_id="i-test", pins=pins) as fwd:
            assert fwd.proc.pid and fwd.proc.poll() is None
            for i in range(3):
                assert get_json(f"{fwd.base_url}/models?n={i}") == {"path": f"/v1/models?n={i}"}
            port, proc = fwd.local_port, fwd.proc
        assert proc.poll() is not None  # the child exited with the context
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert len(tickets) == 1
    assert pins.get("i-test")[0] == "ssh-ed25519"  # the child reported the key it pinned


def test_changed_key_at_start_is_host_key_mismatch(ssh_server, key):
    pins = access.HostKeyPins()
    pins._pins["i-test"] = ("ssh-ed25519", "AAAAsomeotherkey")
    with pytest.raises(access.HostKeyMismatch, match="changed during the run"):
        ProcessForward(lambda: {"key": key, "tcp": ("127.0.0.1", ssh_server["port"])},
                       username=ssh_server["user"], remote_port=1, host_id="i-test", pins=pins)


def test_wrong_key_and_failing_ticket_are_one_access_error(ssh_server):
    with pytest.raises(access.AccessError, match="SSH to i-test failed"):
        ProcessForward(lambda: {"key": access.new_ephemeral_key(), "tcp": ("127.0.0.1", ssh_server["port"])},
                       username=ssh_server["user"], remote_port=1, host_id="i-test",
                       pins=access.HostKeyPins(), timeout=5)

    def refuse():
        raise access.AccessError("g6: send_ssh_public_key: AccessDenied")

    with pytest.raises(access.AccessError, match="send_ssh_public_key: AccessDenied"):
        ProcessForward(refuse, username="u", remote_port=1, host_id="i-test", pins=access.HostKeyPins())


def test_redial_in_the_child_asks_for_a_new_ticket(ssh_server, key):
    proxy = _Proxy(ssh_server["port"])
    tickets = []

    def ticket():
        tickets.append(1)
        return {"key": key, "tcp": ("127.0.0.1", proxy.port)}

    try:
        with http_server() as http_port, \
                ProcessForward(ticket, username=ssh_server["user"], remote_port=http_port,
                               host_id="i-test", pins=access.HostKeyPins(), keepalive=1) as fwd:
            assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
            proxy.cut()  # as when EIC ends the tunnel
            got = _retry(lambda: get_json(fwd.base_url + "/models"))
            assert got == {"path": "/v1/models"}
            _wait(lambda: fwd.reconnects == 1)
            assert len(tickets) == 2 and fwd.error is None
    finally:
        proxy.close()


def test_changed_host_key_on_redial_aborts_the_tunnel(ssh_server, key, tmp_path):
    proxy = _Proxy(ssh_server["port"])
    other = tmp_path / "other"
    other.mkdir()
    try:
        with sshd(require_binary("/usr/sbin/sshd"), other, access.public_key_line(key)) as second, \
                http_server() as http_port, \
                ProcessForward(lambda: {"key": key, "tcp": ("127.0.0.1", proxy.port)},
                               username=ssh_server["user"], remote_port=http_port, host_id="i-test",
                               pins=access.HostKeyPins()) as fwd:
            assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
            proxy.target = second["port"]  # the "same instance" now shows another host key
            proxy.cut()

            def redial_exits() -> bool:  # connections go on until one redials and meets the new key
                with contextlib.suppress(OSError):
                    get_json(fwd.base_url + "/models")
                return fwd.proc.poll() is not None

            _wait(redial_exits)  # the child closed the tunnel and exited
            assert "changed during the run" in (fwd.error or "")
            with pytest.raises(OSError):
                get_json(fwd.base_url + "/models")
    finally:
        proxy.close()


def test_child_exits_when_its_parent_goes(ssh_server, key):
    with http_server() as http_port:
        fwd = ProcessForward(lambda: {"key": key, "tcp": ("127.0.0.1", ssh_server["port"])},
                             username=ssh_server["user"], remote_port=http_port, host_id="i-test",
                             pins=access.HostKeyPins())
        try:
            fwd.proc.stdin.close()  # what the child sees when its parent dies: EOF
            _wait(lambda: fwd.proc.poll() is not None)
        finally:
            fwd.close()


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def _retry(fn, timeout: float = 20.0):
    deadline = time.time() + timeout
    while True:
        try:
            return fn()
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def test_ctrl_c_closes_the_forwarder_process(ssh_server, key, tmp_path):
    """Ctrl-C reaches the whole foreground process group; the user's process closes its
    forwarder on the way out and no forwarder process is left."""
    import os
    import signal
    import subprocess
    import sys

    from harness.access.process import key_to_pem

    pem = tmp_path / "key"
    pem.write_text(key_to_pem(key))
    script = tmp_path / "run.py"
    script.write_text(f"""
import sys, time
from harness.access import tunnel as access
from harness.access.child import key_from_pem
from harness.access.process import ProcessForward
key = key_from_pem(open({str(pem)!r}).read())
with ProcessForward(lambda: {{"key": key, "tcp": ("127.0.0.1", {ssh_server["port"]})}}, username={ssh_server["user"]!r},
                    remote_port=1, host_id="i-test", pins=access.HostKeyPins()) as fwd:
    try:
        print(fwd.proc.pid, flush=True)  # inside the try: Ctrl-C may come right after it
        time.sleep(60)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise
""")
    from tests.bench.conftest import REPO
    from tests.conftest import sigint_as_a_terminal_would
    p = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                         start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                         preexec_fn=sigint_as_a_terminal_would)
    try:
        child = int(p.stdout.readline())
        os.killpg(p.pid, signal.SIGINT)  # as the terminal does: the parent and the forwarder both get it
        p.wait(30)
        assert p.stdout.readline().strip() == "interrupted"
        _wait(lambda: not os.path.exists(f"/proc/{child}") or _zombie(child))
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
