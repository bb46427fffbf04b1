"""The tunnel's data path through OpenSSH's own client (``ssh -L``), where one is installed.

Why: every streamed chunk crosses the forwarder once. paramiko decrypts in Python (~20 us of
CPU per chunk, measured by ``harness.calibration.tunnel``); OpenSSH's client does the same in C
in about half that, in a process of its own, so the forwarder takes less of the machine the load
generator runs on. ``harness.access.process.ProcessForward`` (paramiko) stays the control
connection (host-key pinning, remote commands for ``--bench-from instance``) and the fallback
when ``ssh`` is missing or refuses to start.

One ``ssh`` process per tunnel, supervised:

    ssh -F /dev/null -T -L 127.0.0.1:LOCAL:REMOTE_HOST:REMOTE_PORT [-o ProxyCommand=...] HOST \
        'echo kit-tunnel-ready; exec cat'

- ``-F /dev/null``: none of the user's ssh_config (a ControlMaster, ProxyJump or forwarding
  there would change what is measured and what is exposed); every option is given here. A
  ``-F`` file replaces both ``~/.ssh/config`` and ``/etc/ssh/ssh_config`` (ssh.c
  ``process_config_files``, OpenSSH 8.9 to 10.x). ``IdentityAgent=none`` (ssh unsets
  SSH_AUTH_SOCK) and ``IdentitiesOnly``: only the ephemeral key is offered, so an agent holding
  many keys cannot use up sshd's MaxAuthTries before it (and EIC's AuthorizedKeysCommand runs
  once, for that key's fingerprint).
- A session running a command, on no pty (``-T``), that waits on stdin. The session is what
  turns Nagle's algorithm off: sshd calls ``ssh_packet_set_interactive`` when it starts a
  session's command, pty or not (session.c ``do_exec_no_pty``/``do_exec_pty``), and that sets
  TCP_NODELAY whatever the interactive flag (packet.c, OpenSSH 8.9 to 10.0; from 10.1 sshd sets
  it on every connection: serverloop.c ``process_output``); a forwarding-only connection
  (``-N``) leaves Nagle on at sshd before 10.1, and small streamed chunks wait for the peer's
  delayed ACK (measured: ITL p99 40 ms instead of 4 ms at 16 streams). On ssh's own end: on a
  TCP connection ssh sets it itself (ssh.c ``ssh_session2_setup``; clientloop.c from 10.1); over
  a ProxyCommand it talks to a pipe, and ``harness.access.eic_proxy`` sets it on the websocket's
  socket. No pty, so ssh's stdin reaching EOF reaches ``cat`` as EOF: the session ends and ssh
  exits when this process dies in any way (SIGKILL included), instead of holding the port and
  one of the EIC endpoint's connections until the tunnel's time limit. The remote command prints
  a marker once the session runs; ssh binds the ``-L`` listener before it opens the session
  (ssh.c ``ssh_session2``: ``ssh_init_forwarding`` before ``ssh_session2_open``, 8.9 to 10.x;
  ``ExitOnForwardFailure`` makes a bind failure fatal there), so the marker means the forward is
  listening.
- ProxyCommand: ssh runs it as ``$SHELL -c 'exec COMMAND'`` after expanding %-tokens
  (sshconnect.c ``ssh_proxy_connect``/``expand_proxy_command``; ssh_config(5) ProxyCommand:
  "executed using the user's shell"), so ssh gets ``SHELL=/bin/sh`` here: the POSIX quoting
  below holds and no fish/zsh start-up file runs (or prints into the SSH stream).
- Credentials: the ephemeral private key is a 0600 file in a 0700 directory made for this
  tunnel, deleted as soon as the session is up; over EIC the presigned URL is handed to
  ``harness.access.eic_proxy`` in a 0600 file it deletes on reading. Nothing secret in argv or the
  environment (``AWS_*`` removed). ssh expands %-tokens, ${VAR} and splits on whitespace in
  the paths it is given (ssh_config(5) TOKENS, ENVIRONMENT VARIABLES, UserKnownHostsFile), so
  the directory is made where its path has none of these.
- Host key: the run's pin (learned by the control connection) is the only line of a private
  known_hosts file, checked strictly under ``HostKeyAlias`` = the instance id; a different key is
  refused by ssh and reported here as the tunnel's error.
- Redial: when ssh exits (EIC closes tunnels after at most 3600 s; a network drop), a new ticket
  (fresh key, fresh URL) and the same local port, so ``base_url`` stays valid; retried until
  the tunnel closes (as the paramiko forwarder redials at every connection), except after a
  changed host key.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from harness.access.hostkeys import AccessError, HostKeyMismatch, HostKeyPins
from harness.procs import free_port, stop
from harness.access.process import child_env, key_to_pem

log = logging.getLogger(__name__)

READY = b"kit-tunnel-ready"
_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the harness package
TicketFn = Callable[[], dict]


def find_ssh() -> str | None:
    """OpenSSH's client on PATH, or None (then the paramiko forwarder carries the data)."""
    return shutil.which("ssh")


def _tmp_root() -> str | None:
    """Where the tunnel's directory goes: the usual temporary directory unless its path holds
    what ssh would expand or split (%, $, whitespace: see the module docstring), then /tmp."""
    tmp = tempfile.gettempdir()
    return None if re.fullmatch(r"[A-Za-z0-9/._+-]+", tmp) else "/tmp"


class _Tail:
    """ssh's stderr read to EOF in a thread (so ssh never blocks writing it), keeping the end.

    The remote command's stderr comes here too (no pty); EOF waits for every holder of the pipe,
    the ProxyCommand included, so readers wait a bounded time."""

    def __init__(self, pipe: Any, keep: int = 16384) -> None:
        self._pipe, self._keep, self._buf = pipe, keep, bytearray()
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="ssh-stderr").start()

    def _run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while b := self._pipe.read1(65536):
                self._buf += b
                del self._buf[:-self._keep]
        self._done.set()

    def text(self, wait: float = 5.0) -> str:
        self._done.wait(wait)
        return bytes(self._buf).decode(errors="replace").strip()


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


class OpenSshForward:
    """``ssh -L`` on a local port, redialled with a fresh ticket whenever it exits.

    Attributes as the other forwarders: ``base_url``, ``local_port``, ``remote``, ``reconnects``,
    ``error``, ``close()``, context manager. ``ticket()`` is ``harness.access.process.TicketFn``.
    """

    RETRY_MAX_S = 15.0  # longest wait between two redials

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
        self._dir = Path(tempfile.mkdtemp(prefix="kit-ssh-", dir=_tmp_root()))  # mode 0700
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._dials = itertools.count()
        self.proc: subprocess.Popen | None = None
        self._tail: _Tail | None = None
        self.local_port = free_port()
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
        cmd = [self._ssh, "-F", "/dev/null", "-T", "-i", str(key_file)]
        for k, v in opts.items():
            cmd += ["-o", f"{k}={v}"]
        cmd += ["-L", f"127.0.0.1:{self.local_port}:{self.remote[0]}:{self.remote[1]}"]
        if "ws" in t:
            _write_secret(ticket_file, t["ws"])
            # ssh runs it with $SHELL (= /bin/sh, _start) after expanding %-tokens: quote, escape %.
            proxy = " ".join(shlex.quote(a) for a in (self._python, "-m", "harness.access.eic_proxy", str(ticket_file)))
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
                                    stderr=subprocess.PIPE, cwd=str(_ROOT),
                                    env={**child_env(), "SHELL": "/bin/sh"},  # runs the ProxyCommand
                                    start_new_session=True)  # Ctrl-C is for the parent to handle
            self.proc, self._tail = proc, _Tail(proc.stderr)
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
        err = self._tail.text() if self._tail else ""
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
            proc, tail = self.proc, self._tail
            if proc is None:
                return
            proc.wait()
            if self._closing.is_set():
                return
            err = tail.text() if tail else ""
            log.info("tunnel to %s: ssh exited (%s); redialling", self._host_id,
                     err.splitlines()[-1] if err else proc.returncode)
            if not self._redial():
                return

    def _redial(self) -> bool:
        """Dial until a new forward listens (True), the tunnel closes or the host key changed."""
        for attempt in itertools.count():
            if self._closing.is_set():
                return False
            try:
                with self._lock:
                    self._start()
                    self.reconnects += 1  # counted once the new forward is listening
                self.error = None
                return True
            except HostKeyMismatch as exc:
                self.error = str(exc)
                log.error("tunnel to %s closed: %s", self._host_id, exc)
                return False
            except Exception as exc:  # noqa: BLE001 - retried until the tunnel closes
                self.error = str(exc)
                if attempt % 10 == 0:  # a long outage: a line every ~2.5 min, not every try
                    log.warning("tunnel to %s: redial failed (%s); retrying", self._host_id, exc)
                self._closing.wait(min(2.0 ** min(attempt, 10), self.RETRY_MAX_S))
        return False

    def close(self) -> None:
        self._closing.set()
        proc = self.proc
        if proc is not None:
            stop(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    if pipe is not None:
                        pipe.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "OpenSshForward":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
