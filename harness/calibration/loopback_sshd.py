"""A real OpenSSH server on 127.0.0.1, for measuring the kit's tunnel (``harness.calibration.tunnel``)
and for the access tests (``tests/harness``): its own host key, one authorized key, local
forwarding only. Needs ``/usr/sbin/sshd`` and ``ssh-keygen`` (``make sysdeps``)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

from harness.procs import free_port, stop


@contextlib.contextmanager
def sshd(sshd_bin: str, tmp: Path, authorized_key_line: str, log: Path | None = None) -> Iterator[dict[str, Any]]:
    """sshd on 127.0.0.1 with its own host key and authorized_keys; yields port, host key path.
    With ``log``, sshd writes its debug log (LogLevel DEBUG2) there.

    Sessions get ``HOME`` set to ``tmp`` (sshd_config(5) SetEnv, applied after sshd's own
    variables): bash run by sshd reads ``~/.bashrc`` even for ``bash -c`` (Debian's
    SSH_SOURCE_BASHRC), and a developer's rc file (pyenv's rehash, waiting up to 60 s on a lock)
    must not be part of what the tunnel tests and measurements time."""
    host_key = tmp / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    auth = tmp / "authorized_keys"
    auth.write_text(authorized_key_line + "\n")
    os.chmod(auth, 0o600)
    port = free_port()
    cfg = tmp / "sshd_config"
    user = os.environ.get("USER") or "root"
    cfg.write_text(f"""ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
PidFile {tmp}/sshd.pid
AuthorizedKeysFile {auth}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowTcpForwarding local
X11Forwarding no
SetEnv HOME={tmp}
""" + ("LogLevel DEBUG2\n" if log else ""))
    with contextlib.suppress(OSError):  # privilege-separation directory sshd wants when root
        Path("/run/sshd").mkdir(exist_ok=True)
    err = open(log, "wb") if log else subprocess.PIPE  # noqa: SIM115 - a file (a debug log would fill a pipe), open while sshd runs
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(cfg)], stderr=err)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            if proc.poll() is not None:
                said = log.read_bytes() if log else proc.stderr.read()
                raise RuntimeError(f"sshd exited: {said.decode()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield {"port": port, "host_key": host_key, "user": user}
    finally:
        stop(proc)
        (proc.stderr or err).close()
