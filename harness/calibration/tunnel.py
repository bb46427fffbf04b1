"""What the port-less tunnel costs a measurement: the load benchmark against the paced reference
server, directly and through a real OpenSSH server on loopback, with the forwarders harness.run
can use (``--forwarder``): ``openssh`` (OpenSSH's ssh -L, what harness.run uses where ssh is
installed: ``harness.access.openssh``), ``process`` (paramiko in its own process, the fallback:
``harness.access.process``), ``inprocess`` (paramiko in the load generator's threads, the earlier
in-process forwarder), ``all`` (the three in one run, for a before/after table).

    python -m harness.calibration.tunnel [--levels 1,16,64] [--requests 64] [--forwarder all]
                                         [--rounds 2] [--on-instance] [--json]
    make bench-tunnel ARGS='--levels 16,64 --requests 128'

Prints TTFT, inter-token latency and output tok/s per level for both paths, then the tunnel's
difference from direct per level (``--json``: the same as one JSON document on stdout). Needs
/usr/sbin/sshd and ssh-keygen (``make sysdeps``). The EIC websocket hop of a real run is not
included: it adds the network path to the AWS endpoint and back, which loopback cannot imitate.
A measurement, not a test: run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from harness.access import tunnel as access
from harness.bench.api import run_bench
from harness.bench.spec import BenchSpec
from harness.calibration.args import positive, positive_ints
from harness.calibration.loopback_sshd import sshd
from harness.calibration.refserver import RefServerProcess
from harness.calibration.relay import nginx_relays, stream_module
from harness.endpoint import Endpoint
from harness.access.openssh import OpenSshForward
from harness.access.process import ProcessForward
from kit.contracts.results import TUNNEL_CALIBRATION
from kit.cli import OneLineParser, one_line_errors

PROG = "python -m harness.calibration.tunnel"
SSHD = "/usr/sbin/sshd"
OUTPUT_TOKENS = 64
REPO = Path(__file__).resolve().parents[2]
CONTROL = "relay-2x-nginx"
FORWARDERS = {"openssh": ("tunnel-openssh",), "process": ("tunnel-paramiko",),
              "inprocess": ("tunnel-inproc",), "all": ("tunnel-openssh", "tunnel-paramiko", "tunnel-inproc")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", type=positive_ints, default=[1, 16, 64], help="concurrencies (default 1,16,64)")
    ap.add_argument("--requests", type=positive(int), default=64, help="requests per level (default 64)")
    ap.add_argument("--itl-ms", type=positive(float), default=10.0, help="server pacing per token (default 10)")
    ap.add_argument("--ttft-ms", type=positive(float), default=100.0, help="server time to first token (default 100)")
    ap.add_argument("--switch-interval", type=positive(float), default=None,
                    help="sys.setswitchinterval for this process (Python's default is 0.005 s)")
    ap.add_argument("--no-pty-session", action="store_true",
                    help="skip the pty session that makes sshd set TCP_NODELAY (to see what it buys)")
    ap.add_argument("--forwarder", choices=sorted(FORWARDERS), default="openssh",
                    help="openssh: OpenSSH's ssh -L, as harness.run runs it where ssh is installed "
                         "(path 'tunnel-openssh'); process: paramiko in its own process, the "
                         "fallback ('tunnel-paramiko'); inprocess: paramiko in the load generator's "
                         "threads, the earlier forwarder ('tunnel-inproc'); all (default openssh)")
    ap.add_argument("--on-instance", action="store_true",
                    help="also the path 'on-instance': the bench shipped over the SSH connection and run "
                         "next to the server, as harness.run --bench-from instance does")
    ap.add_argument("--control", action="store_true",
                    help="also the path 'relay-2x-nginx': two chained nginx stream relays, no SSH "
                         "(harness/calibration/relay.py), the floor any two-hop forwarder has on this "
                         "machine; needs nginx with its stream module")
    ap.add_argument("--rounds", type=positive(int), default=1,
                    help="measure every path this many times, interleaved (direct, tunnel, direct, "
                         "tunnel, ...); the comparison uses each quantity's median over the rounds, "
                         "so a drift of the machine during the run does not land on one path")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--markdown", action="store_true",
                    help="print Markdown tables of the medians and the comparison instead (as in the README)")
    ap.add_argument("--render", metavar="FILE", default=None,
                    help="measure nothing: print the Markdown of a saved --json result (docs/measurements/)")
    return ap.parse_args(argv)


def _proc_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc/PID/stat fields 14 and 15,
    in clock ticks: proc(5)); None where there is no /proc (macOS: the column shows "-")."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _level_row(path: str, lv: dict, forwarder_cpu_s: float | None = None) -> dict:
    """One level of one path. CPU per streamed chunk, which a busy machine disturbs far less than
    latency: ``client_cpu_us_per_chunk`` is the load generator's process (it includes the
    in-process forwarder's threads on 'tunnel-inproc'); ``forwarder_cpu_us_per_chunk`` is the
    forwarder process's ('tunnel' only)."""
    chunks = lv.get("chunks") or 0
    return {"path": path, "concurrency": lv["concurrency"], "completed": lv["completed"],
            "failed": lv["failed"],
            "ttft_ms": {"p50": lv["ttft_ms"]["p50"], "p99": lv["ttft_ms"]["p99"]},
            "itl_ms": {"p50": lv["itl_ms"]["p50"], "p99": lv["itl_ms"]["p99"]},
            "output_tok_s": lv["output_tok_s"],
            "client_cpu_us_per_chunk": lv.get("client_cpu_us_per_chunk"),
            "forwarder_cpu_us_per_chunk": round(forwarder_cpu_s / chunks * 1e6, 2)
            if forwarder_cpu_s is not None and chunks else None}


def _median_rows(rows: list[dict]) -> dict[tuple[str, int], dict]:
    """(path, concurrency) -> each compared quantity's median over the rounds."""
    from statistics import median

    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["path"], r["concurrency"]), []).append(r)
    def med(values: list) -> float | None:
        values = [v for v in values if v is not None]
        return median(values) if values else None

    return {k: {"ttft_ms": {q: med([r["ttft_ms"][q] for r in g]) for q in ("p50", "p99")},
                "itl_ms": {q: med([r["itl_ms"][q] for r in g]) for q in ("p50", "p99")},
                "output_tok_s": med([r["output_tok_s"] for r in g]),
                "client_cpu_us_per_chunk": med([r.get("client_cpu_us_per_chunk") for r in g]),
                "forwarder_cpu_us_per_chunk": med([r.get("forwarder_cpu_us_per_chunk") for r in g]),
                "rounds": len(g)}
            for k, g in groups.items()}


# What "the tunnel does not compete with the load generator" means, as limits
# on each path's difference from direct.
TARGET = {"output_tok_s_rel": 0.02, "ttft_p99_ms": 3.0, "itl_p99_ms": 2.0, "itl_p50_ratio": 0.10}


def misses(c: dict) -> list[str]:
    """The target's limits a comparison row exceeds (empty: it meets them)."""
    out = []
    if c["output_tok_s_rel"] is None or abs(c["output_tok_s_rel"]) > TARGET["output_tok_s_rel"]:
        out.append("tok/s within 2%")
    if c["ttft_p99_ms"] > TARGET["ttft_p99_ms"]:
        out.append("TTFT p99 within +3 ms")
    if c["itl_p99_ms"] > TARGET["itl_p99_ms"]:
        out.append("ITL p99 within +2 ms")
    if c["itl_p50_ratio"] is None or abs(c["itl_p50_ratio"] - 1) > TARGET["itl_p50_ratio"]:
        out.append("ITL p50 within 10%")
    return out


def compare(rows: list[dict]) -> list[dict]:
    """Each tunnel path minus direct per concurrency (medians over rounds): the quantities
    TARGET's limits are stated in."""
    by = _median_rows(rows)
    out = []
    for (path, conc), t in sorted(by.items(), key=lambda kv: kv[0][1]):
        d = by.get(("direct", conc))
        if path == "direct" or d is None:
            continue
        out.append({
            "path": path, "concurrency": conc,
            "ttft_p99_ms": round(t["ttft_ms"]["p99"] - d["ttft_ms"]["p99"], 3),
            "itl_p99_ms": round(t["itl_ms"]["p99"] - d["itl_ms"]["p99"], 3),
            "itl_p50_ratio": round(t["itl_ms"]["p50"] / d["itl_ms"]["p50"], 4) if d["itl_ms"]["p50"] else None,
            "output_tok_s_rel": round(t["output_tok_s"] / d["output_tok_s"] - 1, 4) if d["output_tok_s"] else None,
        })
        out[-1]["misses"] = misses(out[-1])
    return out


def markdown(result: dict) -> str:
    """Per concurrency, one column per path (medians over the rounds), then each path's
    difference from direct and the target's verdict: the README's table, from one run."""
    by = _median_rows(result["levels"])
    paths = list(dict.fromkeys(r["path"] for r in result["levels"]))
    lines = []
    ref = result.get("reference")
    if ref:
        lines += [f"Reference server: TTFT {ref['ttft_ms']:g} ms, {ref['itl_ms']:g} ms per token, "
                  f"{ref['output_tokens']} tokens; {ref['requests_per_level']} requests per level.", ""]
    for conc in sorted({c for _, c in by}):
        cols = [p for p in paths if (p, conc) in by]
        n = by[(cols[0], conc)]["rounds"]
        lines += [f"| {conc} streams ({'median of ' + str(n) + ' rounds' if n > 1 else '1 round'}) | "
                  + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]

        def row(label: str, fmt) -> str:
            return f"| {label} | " + " | ".join(fmt(by[(p, conc)]) for p in cols) + " |"

        lines.append(row("TTFT p50 / p99 ms", lambda m: f"{m['ttft_ms']['p50']:.1f} / {m['ttft_ms']['p99']:.1f}"))
        lines.append(row("ITL p50 / p99 ms", lambda m: f"{m['itl_ms']['p50']:.2f} / {m['itl_ms']['p99']:.2f}"))
        lines.append(row("output tok/s", lambda m: f"{m['output_tok_s']:,.0f}"))
        lines.append(row("CPU µs per chunk: load generator / forwarder",
                         lambda m: f"{_us(m['client_cpu_us_per_chunk'])} / {_us(m['forwarder_cpu_us_per_chunk'])}"))
        lines.append("")
    for c in result["tunnel_vs_direct"]:
        verdict = "meets the target" if not c["misses"] else "misses: " + ", ".join(c["misses"])
        p50 = f"x{c['itl_p50_ratio']:.2f}" if c["itl_p50_ratio"] is not None else "n/a"
        tok = f"{c['output_tok_s_rel']:+.1%}" if c["output_tok_s_rel"] is not None else "n/a"
        lines.append(f"- {c['path']} − direct, {c['concurrency']} streams: TTFT p99 {c['ttft_p99_ms']:+.1f} ms, "
                     f"ITL p99 {c['itl_p99_ms']:+.2f} ms, ITL p50 {p50}, tok/s {tok}: {verdict}")
    return "\n".join(lines)


def _forwarder(name: str, s: dict, key, port: int, a: argparse.Namespace):
    """The forwarder for one tunnel path (``FORWARDERS``)."""
    if name == "tunnel-openssh":
        return OpenSshForward(lambda: {"key": key, "tcp": ("127.0.0.1", s["port"])}, username=s["user"],
                              remote_port=port, host_id="loopback", pins=access.HostKeyPins())
    if name == "tunnel-paramiko":
        return ProcessForward(lambda: {"key": key, "tcp": ("127.0.0.1", s["port"])}, username=s["user"],
                              remote_port=port, host_id="loopback", pins=access.HostKeyPins(),
                              switch_interval=a.switch_interval, pty_session=not a.no_pty_session)
    dial = lambda: (socket.create_connection(("127.0.0.1", s["port"])), key, lambda: None)  # noqa: E731
    return access.SshForward(dial, username=s["user"], remote_port=port, host_id="loopback",
                             pins=access.HostKeyPins())


def _on_instance(s: dict, key, port: int, a: argparse.Namespace, tmp: Path, report) -> list[dict]:
    """Path 'on-instance': the bench shipped over the loopback SSH connection and run there
    against the server's loopback, as ``harness.run --bench-from instance`` does (this
    machine's Python plays the instance's)."""
    from harness.bench.remote import run_remote_bench

    rows = []
    with ProcessForward(lambda: {"key": key, "tcp": ("127.0.0.1", s["port"])}, username=s["user"],
                        remote_port=port, host_id="loopback", pins=access.HostKeyPins()) as fwd:
        ep = Endpoint("on-instance", protocol="openai", model_id="ref-model", base_url=fwd.base_url)
        for conc in a.levels:
            lv = run_remote_bench(fwd, ep, tmp / "on-instance" / str(conc), remote_port=port,
                                  spec=BenchSpec(profile="agent", concurrency=(conc,), requests=a.requests),
                                  echo=lambda line: None, pythons=(sys.executable,))[0]
            rows.append(_level_row("on-instance", lv))
            report(rows[-1])
    return rows


def measure(a: argparse.Namespace, report=print) -> dict:
    ref = RefServerProcess(cwd=str(REPO))
    try:
        ref.configure(ttft_ms=a.ttft_ms, itl_ms=a.itl_ms, tokens_per_chunk=1, usage="vllm",
                      output_tokens=OUTPUT_TOKENS, record=False)
        port = int(ref.url.rsplit(":", 1)[1])
        key = access.new_ephemeral_key()
        rows: list[dict] = []
        with tempfile.TemporaryDirectory() as tmp, sshd(SSHD, Path(tmp), access.public_key_line(key)) as s, \
                contextlib.ExitStack() as stack:
            paths, forwarders = {"direct": ref.base_url}, {}
            for name in FORWARDERS[a.forwarder]:
                forwarders[name] = stack.enter_context(_forwarder(name, s, key, port, a))
                paths[name] = forwarders[name].base_url
            if a.control:
                paths[CONTROL] = f"http://127.0.0.1:{stack.enter_context(nginx_relays(port))}/v1"
            for rnd in range(1, a.rounds + 1):
                for name, url in paths.items():
                    ep = Endpoint(name, protocol="openai", model_id="ref-model", base_url=url)
                    fwd = forwarders.get(name)
                    pid = fwd.proc.pid if fwd is not None and name != "tunnel-inproc" else None
                    for conc in a.levels:  # one level at a time: the forwarder process's CPU per level
                        cpu0 = _proc_cpu_s(pid)
                        lv = run_bench(ep, BenchSpec(profile="agent", concurrency=(conc,), requests=a.requests,
                                                     progress=False),
                                       out_dir=Path(tmp) / str(rnd) / name / str(conc))[0]
                        cpu1 = _proc_cpu_s(pid)
                        rows.append(_level_row(name, lv, None if cpu0 is None or cpu1 is None else cpu1 - cpu0)
                                    | {"round": rnd})
                        report(rows[-1])
                if a.on_instance:
                    rows += [r | {"round": rnd} for r in _on_instance(s, key, port, a, Path(tmp) / str(rnd), report)]
    finally:
        ref.stop()
    return {"reference": {"ttft_ms": a.ttft_ms, "itl_ms": a.itl_ms, "output_tokens": OUTPUT_TOKENS,
                          "tokens_per_chunk": 1, "requests_per_level": a.requests, "rounds": a.rounds},
            "pty_session": not a.no_pty_session, "forwarder": a.forwarder, "levels": rows,
            "tunnel_vs_direct": compare(rows)}


def _print_row(r: dict) -> None:
    t, i = r["ttft_ms"], r["itl_ms"]
    print(f"{r['path']:<16} {r['concurrency']:>4} {r['completed']:>4} {r['failed']:>4} {t['p50']:>9.1f} "
          f"{t['p99']:>9.1f} {i['p50']:>8.2f} {i['p99']:>8.2f} {r['output_tok_s']:>10.0f} "
          f"{_us(r['client_cpu_us_per_chunk']):>12} {_us(r['forwarder_cpu_us_per_chunk']):>12}", flush=True)


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def render(path: str) -> int:
    try:  # a file of any version (kit/contracts/results.py TUNNEL_CALIBRATION; before versions too)
        notes: list[str] = []
        result = TUNNEL_CALIBRATION.read(json.loads(Path(path).read_text()), path, notes)
        if result is None:
            raise ValueError("; ".join(notes))
        for line in notes:
            print(f"{PROG}: {line}", file=sys.stderr)
        rows = result["levels"]
        print(markdown({"reference": result.get("reference"), "levels": rows, "tunnel_vs_direct": compare(rows)}))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{PROG}: --render {path}: not a saved --json result ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2
    return 0


@one_line_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.render:
        return render(a.render)
    missing = [p for p in (SSHD, shutil.which("ssh-keygen")) if not p or not os.access(p, os.X_OK)]
    if missing:
        print(f"{PROG}: needs OpenSSH's {SSHD} and ssh-keygen (make sysdeps, or apt-get install "
              "openssh-server)", file=sys.stderr)
        return 2
    if a.control and stream_module() is None:
        print(f"{PROG}: --control needs nginx with its stream module (make sysdeps, or apt-get install "
              "nginx-light libnginx-mod-stream)", file=sys.stderr)
        return 2
    if a.no_pty_session:
        access._mark_interactive = lambda transport, host_id: None
    if a.switch_interval:
        sys.setswitchinterval(a.switch_interval)
    quiet = a.json or a.markdown
    if not quiet:
        print(f"reference server: TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, {OUTPUT_TOKENS} tokens; "
              f"{a.requests} requests per level")
        print(f"{'path':<16} {'conc':>4} {'ok':>4} {'fail':>4} {'ttft p50':>9} {'ttft p99':>9} "
              f"{'itl p50':>8} {'itl p99':>8} {'out tok/s':>10} {'cli us/chunk':>12} {'fwd us/chunk':>12}",
              flush=True)
    result = measure(a, report=(lambda r: None) if quiet else _print_row)
    if a.json:
        print(json.dumps(TUNNEL_CALIBRATION.stamp(result), indent=2))
        return 0
    if a.markdown:
        print(markdown(result))
        return 0
    for c in result["tunnel_vs_direct"]:
        p50 = f"ITL p50 x{c['itl_p50_ratio']:.2f}" if c["itl_p50_ratio"] is not None else "ITL p50 n/a"
        tok = f"tok/s {c['output_tok_s_rel']:+.1%}" if c["output_tok_s_rel"] is not None else "tok/s n/a"
        verdict = "meets the target" if not c["misses"] else "misses " + ", ".join(c["misses"])
        print(f"{c['path']} - direct at {c['concurrency']} streams: TTFT p99 {c['ttft_p99_ms']:+.1f} ms, "
              f"ITL p99 {c['itl_p99_ms']:+.2f} ms, {p50}, {tok}: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
