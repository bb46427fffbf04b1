"""The floor any two-hop forwarder has on this machine: two chained nginx stream relays (C, one
worker each, TCP_NODELAY, no encryption), standing in for sshd + ssh without their crypto.

Used by ``python -m harness.calibration.tunnel --control``: if even these two relays move the
64-stream figures beyond the tunnel limits (``TARGET`` in harness/calibration/tunnel.py), the
limit is the machine (every hop shares its cores with the reference server and the load
generator), not the SSH forwarder. Needs nginx with its stream module (Debian: ``nginx-light``
and ``libnginx-mod-stream``; ``make sysdeps``).
"""
from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

from harness.procs import free_port, stop


def stream_module() -> Path | None:
    """nginx's stream module, from the modules path nginx was built with (``nginx -V``)."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not nginx:
        return None
    out = subprocess.run([nginx, "-V"], capture_output=True, text=True).stderr
    m = re.search(r"--modules-path=(\S+)", out)
    candidate = Path(m.group(1) if m else "/usr/lib/nginx/modules") / "ngx_stream_module.so"
    return candidate if candidate.exists() else None


def _config(tmp: Path, module: Path, listen: int, target: int) -> str:
    return f"""load_module {module};
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 4096; }}
stream {{
    server {{
        listen 127.0.0.1:{listen};
        proxy_pass 127.0.0.1:{target};
        tcp_nodelay on;
    }}
}}
"""


@contextlib.contextmanager
def nginx_relays(target_port: int, hops: int = 2) -> Iterator[int]:
    """``hops`` chained relays in front of 127.0.0.1:target_port; yields the front port."""
    module = stream_module()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if module is None:
        raise RuntimeError("nginx with its stream module is not installed (Debian: nginx-light "
                           "libnginx-mod-stream; make sysdeps)")
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="kit-relay-") as tmp:
        try:
            target = target_port
            for i in range(hops):
                d = Path(tmp) / str(i)
                d.mkdir()
                port = free_port()
                (d / "nginx.conf").write_text(_config(d, module, port, target))
                procs.append(subprocess.Popen([nginx, "-c", str(d / "nginx.conf"), "-p", str(d)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                _wait_listening(port, procs[-1], d)
                target = port
            yield target
        finally:
            for p in procs:
                stop(p)
                if p.stderr:
                    p.stderr.close()


def _wait_listening(port: int, proc: subprocess.Popen, d: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = d / "error.log"
            err = (proc.stderr.read().decode() if proc.stderr else "") or (log.read_text() if log.exists() else "")
            raise RuntimeError(f"nginx relay exited: {err.strip()[-300:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nginx relay did not listen on 127.0.0.1:{port} within 10 s")
