"""What the port-less tunnel costs a measurement: the load benchmark against a paced reference
server, directly and through paramiko + a real OpenSSH server on loopback (the same SshForward
harness.run uses, in the same process as the load generator, as in a real run).

    .venv/bin/python -m tests.harness.measure_tunnel [--levels 1,16,64] [--requests 64]

Prints TTFT, inter-token latency and output tok/s per level for both paths. Needs /usr/sbin/sshd
(make sysdeps). The EIC websocket hop of a real run is not included: it adds the network path to
the AWS endpoint and back, which loopback cannot imitate.
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import access
from harness.bench.api import run_bench
from harness.endpoint import Endpoint
from tests.harness.servers import sshd


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval for this process (Python's default is 0.005 s)")
    ap.add_argument("--no-pty-session", action="store_true",
                    help="skip the pty session that makes sshd set TCP_NODELAY (to see what it buys)")
    a = ap.parse_args()
    if a.no_pty_session:
        access._mark_interactive = lambda transport, host_id: None
    if a.switch_interval:
        sys.setswitchinterval(a.switch_interval)
    levels = [int(x) for x in a.levels.split(",")]
    ref = subprocess.Popen([sys.executable, "-m", "harness.bench.refserver", "--ttft-ms", str(a.ttft_ms),
                            "--itl-ms", str(a.itl_ms), "--tokens-per-chunk", "1", "--usage", "vllm",
                            "--output-tokens", "64"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(ref.stdout.readline().strip().rsplit(":", 1)[1])
        key = access.new_ephemeral_key()
        with tempfile.TemporaryDirectory() as tmp, sshd("/usr/sbin/sshd", Path(tmp), access.public_key_line(key)) as s:
            dial = lambda: (socket.create_connection(("127.0.0.1", s["port"])), key, lambda: None)  # noqa: E731
            with access.SshForward(dial, username=s["user"], remote_port=port, host_id="loopback",
                                   pins=access.HostKeyPins()) as fwd:
                paths = {"direct": f"http://127.0.0.1:{port}/v1", "tunnel": fwd.base_url}
                print(f"reference server: TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, 64 tokens; "
                      f"{a.requests} requests per level")
                print(f"{'path':<7} {'conc':>4} {'ok':>4} {'fail':>4} {'ttft p50':>9} {'ttft p99':>9} "
                      f"{'itl p50':>8} {'itl p99':>8} {'out tok/s':>10}")
                for name, url in paths.items():
                    ep = Endpoint(name, "openai", "ref-model", base_url=url)
                    with tempfile.TemporaryDirectory() as out:
                        for lv in run_bench(ep, profile="agent", concurrency=levels, requests=a.requests,
                                            out_dir=Path(out) / name, progress=False):
                            t, i = lv["ttft_ms"], lv["itl_ms"]
                            print(f"{name:<7} {lv['concurrency']:>4} {lv['completed']:>4} {lv['failed']:>4} "
                                  f"{t['p50']:>9.1f} {t['p99']:>9.1f} {i['p50']:>8.2f} {i['p99']:>8.2f} "
                                  f"{lv['output_tok_s']:>10.0f}")
    finally:
        ref.terminate()
        ref.wait(10)


if __name__ == "__main__":
    main()
