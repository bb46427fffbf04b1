"""The tunnel's data path through OpenSSH's own client (``ssh -L``), where one is installed.

Why: every streamed chunk crosses the forwarder once. paramiko decrypts in Python (~20 us of
CPU per chunk, measured by ``harness.calibration.tunnel``); OpenSSH's client does the same in C
in about half that, in a process of its own, so the forwarder takes less of the machine the load
generator runs on. ``harness.tunnel_proc.ProcessForward`` (paramiko) stays the control
connection (host-key pinning, remote commands for ``--bench-from instance``) and the fallback
when ``ssh`` is missing or refuses to start.

One ``ssh`` process per tunnel, supervised:

    ssh -F /dev/null -tt -L 127.0.0.1:LOCAL:REMOTE_HOST:REMOTE_PORT [-o ProxyCommand=...] HOST \
        'echo kit-tunnel-ready; exec cat'

- ``-F /dev/null``: none of the user's ssh_config (a ControlMaster, ProxyJump or forwarding
  there would change what is measured and what is exposed); every option is given here.
- ``-tt`` and a remote command that waits on stdin: OpenSSH sets TCP_NODELAY on its connection
  only for an interactive (pty) session, on both ends (ssh(1) clientloop/sshd(8) session:
  ``ssh_packet_set_interactive``); a forwarding-only connection keeps Nagle's algorithm on and
  holds small streamed chunks for the peer's delayed ACK (measured: ITL p99 40 ms instead of
  4 ms at 16 streams). The remote command prints a marker once the session runs; ssh binds the
  ``-L`` listener before it opens the session (ssh.c: ``ssh_init_forwarding`` precedes
  ``ssh_session2_open``), so the marker means the forward is listening.
- Credentials: the ephemeral private key is a 0600 file in a 0700 directory made for this
  tunnel, deleted as soon as the session is up; over EIC the presigned URL is handed to
  ``harness.eic_proxy`` in a 0600 file it deletes on reading. Nothing secret in argv or the
  environment (``AWS_*`` removed).
- Host key: the run's pin (learned by the control connection) is the only line of a private
  known_hosts file, checked strictly under ``HostKeyAlias`` = the instance id; a different key is
  refused by ssh and reported here as the tunnel's error.
- Redial: when ssh exits (EIC closes tunnels after at most 3600 s; a network drop), a new ticket
  (fresh key, fresh URL) and the same local port, so ``base_url`` stays valid.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from harness.hostkeys import AccessError, HostKeyMismatch, HostKeyPins
from harness.tunnel_proc import child_env, key_to_pem

log = logging.getLogger(__name__)

READY = b"kit-tunnel-ready"
_ROOT = Path(__file__).resolve().parents[1]  # the directory holding the harness package
TicketFn = Callable[[], dict]


def find_ssh() -> str | None:
    """OpenSSH's client on PATH, or None (then the paramiko forwarder carries the data)."""
    return shutil.which("ssh")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


class OpenSshForward:
    """``ssh -L`` on a local port, redialled with a fresh ticket whenever it exits.

    Attributes as the other forwarders: ``base_url``, ``local_port``, ``remote``, ``reconnects``,
    ``error``, ``close()``, context manager. ``ticket()`` is ``harness.tunnel_proc.TicketFn``.
    """

    def __init__(self, ticket: TicketFn, *, username: str, remote_port: int, host_id: str,
                 pins: HostKeyPins, remote_host: str = "127.0.0.1", timeout: float = 20.0,
                 keepalive: int = 30, ssh: str | None = None, python: str = sys.executable) -> None:
        self.remote = (remote_host, remote_port)
        self.reconnects = 0
        self.error: str | None = None
        self._ticket, self._user, self._host_id, self._pins = ticket, username, host_id, pins
        self._timeout, self._keepalive, self._python = timeout, keepalive, python
        self._ssh = ssh or find_ssh()
        if not self._ssh:
            raise AccessError("OpenSSH's ssh is not on PATH")
        self._dir = Path(tempfile.mkdtemp(prefix="kit-ssh-"))  # mkdtemp: mode 0700
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._dials = itertools.count()
        self.proc: subprocess.Popen | None = None
        self.local_port = _free_port()
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        self._watch = threading.Thread(target=self._supervise, daemon=True, name="openssh-supervisor")
        self._watch.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}/v1"

    # ------------------------------------------------------------------ one ssh process
    def _command(self, t: dict, key_file: Path, known_hosts: Path, ticket_file: Path) -> list[str]:
        opts = {
            "BatchMode": "yes", "IdentitiesOnly": "yes", "IdentityAgent": "none",
            "PasswordAuthentication": "no", "KbdInteractiveAuthentication": "no",
            "UserKnownHostsFile": str(known_hosts), "GlobalKnownHostsFile": "/dev/null",
            "HostKeyAlias": self._host_id, "CheckHostIP": "no", "UpdateHostKeys": "no",
            "StrictHostKeyChecking": "yes" if self._pins.get(self._host_id) else "accept-new",
            "ExitOnForwardFailure": "yes", "ClearAllForwardings": "no",
            "ForwardAgent": "no", "ForwardX11": "no", "ControlMaster": "no", "ControlPath": "none",
            "ServerAliveInterval": str(self._keepalive), "ServerAliveCountMax": "3",
            "ConnectTimeout": str(int(self._timeout)), "EscapeChar": "none", "LogLevel": "ERROR",
        }
        cmd = [self._ssh, "-F", "/dev/null", "-tt", "-i", str(key_file)]
        for k, v in opts.items():
            cmd += ["-o", f"{k}={v}"]
        cmd += ["-L", f"127.0.0.1:{self.local_port}:{self.remote[0]}:{self.remote[1]}"]
        if "ws" in t:
            _write_secret(ticket_file, t["ws"])
            # ssh runs it with /bin/sh after expanding %-tokens (ssh_config(5) TOKENS): quote, escape %.
            proxy = " ".join(shlex.quote(a) for a in (self._python, "-m", "harness.eic_proxy", str(ticket_file)))
            proxy = proxy.replace("%", "%%")
            cmd += ["-o", f"ProxyCommand={proxy}", f"{self._user}@{self._host_id}"]
        else:
            host, port = t["tcp"]
            cmd += ["-p", str(int(port)), f"{self._user}@{host}"]
        return cmd + [f"echo {READY.decode()}; exec cat"]

    def _start(self) -> None:
        t = self._ticket()
        n = next(self._dials)
        key_file, known_hosts = self._dir / f"id-{n}", self._dir / "known_hosts"
        ticket_file = self._dir / f"ticket-{n}"
        pin = self._pins.get(self._host_id)
        known_hosts.write_text(f"{self._host_id} {pin[0]} {pin[1]}\n" if pin else "")
        _write_secret(key_file, key_to_pem(t["key"]))
        try:
            cmd = self._command(t, key_file, known_hosts, ticket_file)
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=str(_ROOT), env=child_env(),
                                    start_new_session=True)  # Ctrl-C is for the parent to handle
            self.proc = proc
            self._await_ready(proc)
        finally:
            for f in (key_file, ticket_file):
                with contextlib.suppress(OSError):
                    f.unlink()
        if not pin:  # first contact through this path: pin what ssh accepted
            self._pin_from(known_hosts)
        threading.Thread(target=self._drain, args=(proc,), daemon=True).start()

    def _await_ready(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        seen = bytearray()
        deadline = time.monotonic() + 3 * self._timeout + 30
        done = threading.Event()

        def read() -> None:
            with contextlib.suppress(OSError, ValueError):
                while READY not in seen:
                    b = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else proc.stdout.read(1)
                    if not b:
                        break
                    seen.extend(b)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        done.wait(max(0.0, deadline - time.monotonic()))
        if READY in seen:
            return
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait(5)
        err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace").strip()
        last = err.splitlines()[-1] if err else f"ssh exited with status {proc.returncode}"
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in err or "Host key verification failed" in err:
            raise HostKeyMismatch(f"host key of {self._host_id} changed during the run "
                                  f"(OpenSSH refused it); aborting")
        raise AccessError(f"SSH (OpenSSH) to {self._host_id} failed: {last}")

    def _pin_from(self, known_hosts: Path) -> None:
        for line in known_hosts.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                self._pins.check_blob(self._host_id, parts[1], parts[2])
                return

    @staticmethod
    def _drain(proc: subprocess.Popen) -> None:
        """Read what the session prints (nothing after the marker) so ssh never blocks on a pipe."""
        with contextlib.suppress(OSError, ValueError):
            while proc.stdout is not None and proc.stdout.read(65536):
                pass

    # ------------------------------------------------------------------ supervision
    def _supervise(self) -> None:
        while not self._closing.is_set():
            proc = self.proc
            if proc is None:
                return
            proc.wait()
            if self._closing.is_set():
                return
            err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace").strip()
            log.info("tunnel to %s: ssh exited (%s); redialling", self._host_id,
                     err.splitlines()[-1] if err else proc.returncode)
            for attempt in range(5):
                if self._closing.is_set():
                    return
                try:
                    with self._lock:
                        self._start()
                        self.reconnects += 1  # counted once the new forward is listening
                    break
                except HostKeyMismatch as exc:
                    self.error = str(exc)
                    log.error("tunnel to %s closed: %s", self._host_id, exc)
                    return
                except Exception as exc:  # noqa: BLE001 - retried, then recorded
                    self.error = str(exc)
                    self._closing.wait(min(2 ** attempt, 15))
            else:
                log.error("tunnel to %s: %s", self._host_id, self.error)
                return
            self.error = None

    def close(self) -> None:
        self._closing.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    if pipe is not None:
                        pipe.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "OpenSshForward":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
