"""The locustfile runs headless against the reference server and leaves records that
harness.bench.summarize turns into the same summary as the benchmark's."""
from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time

from harness.bench import metrics
from tests.bench.conftest import REPO
from tests.conftest import saved_levels


def test_locust_headless_writes_records_and_summarizes(ref, tmp_path):
    ref.configure(ttft_ms=20, itl_ms=2, tokens_per_chunk=2)
    out = tmp_path / "locust"
    p = subprocess.run([sys.executable, "-m", "locust", "-f", "harness/bench/locustfile.py", "--headless",
                        "-u", "3", "-r", "3", "-t", "3s", "--host", ref.url, "--only-summary",
                        "--bench-profile", "10-12", "--bench-out", str(out), "--stop-timeout", "5",
                        "--exit-code-on-error", "1"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    files = list(out.glob("requests-*.jsonl"))
    assert len(files) == 1
    recs = [json.loads(x) for x in files[0].read_text().splitlines()]
    assert len(recs) >= 6 and all(r["ok"] for r in recs)
    assert {r["concurrency"] for r in recs} == {3} and recs[0]["model"] == "ref-model"
    assert all(r["output_tokens"] == 12 and r["chunk_tokens_source"] == "usage_delta" for r in recs)
    srv = ref.records()
    assert {r["id"] for r in recs} <= set(srv)  # the same X-Request-Id as the benchmark sends
    s = subprocess.run([sys.executable, "-m", "harness.bench.summarize", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    lv = saved_levels(out / "summary.json")[0]
    assert lv["concurrency"] == 3 and lv["completed"] == len(recs)
    # against the server's record, not its nominal pacing (a loaded machine moves both): chunk for
    # chunk what it sent, nothing stamped before it was sent, TTFT no earlier than the server's,
    # and the per-token ITL within 1 ms of the server's own (per chunk it would be 2 ms more) plus
    # the lateness this run measured; loose: gevent client
    late_all, drift, true_itl = [], [], []
    for r in recs:
        s = srv[r["id"]]
        assert r["chunk_tokens"] == s["chunk_tokens"] == [2] * 6
        late = [(r["t_sent_ns"] + us * 1000 - ns) / 1e6 for us, ns in zip(r["chunk_us"], s["chunk_ns"])]
        assert min(late) > -0.001, min(late)
        late_all += late
        drift.append(abs(late[-1] - late[0]) / 10)  # 5 gaps x 2 tokens: 10 ITL values
        true_itl.append((s["chunk_ns"][-1] - s["chunk_ns"][0]) / 1e6 / 10)
        assert metrics.ttft_ms(r) >= (s["chunk_ns"][0] - s["t_recv_ns"]) / 1e6 - 0.001
    assert statistics.median(late_all) < 5.0, statistics.median(late_all)
    assert abs(lv["itl_ms"]["mean"] - statistics.fmean(true_itl)) < 1.0 + statistics.fmean(drift), \
        (lv["itl_ms"], statistics.fmean(true_itl), statistics.fmean(drift))
    assert "TTFT" in p.stdout + p.stderr  # Locust's own table has our TTFT entries


def wait_for(cond, what: str, timeout: float = 120) -> None:
    """Poll until ``cond()`` (returns as soon as it holds); the deadline only stops a hang."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"after {timeout} s still waiting for {what}"
        time.sleep(0.1)


def stop_locust(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM: Locust's own shutdown (the same runner.quit() as the end of -t)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_locust_stopping_mid_request_still_records_it(ref, tmp_path):
    """Without --stop-timeout Locust kills users mid-request (GreenletExit): each request the
    server saw is still in the records, as failed. Every request hangs after its role chunk, and
    Locust is stopped once the server has both users' requests: mid-request by construction,
    not by a -t that a busy machine can make land between requests or before the first."""
    ref.configure(ttft_ms=20, itl_ms=5, fault="hang", fault_every=1)
    out = tmp_path / "locust"
    proc = subprocess.Popen([sys.executable, "-m", "locust", "-f", "harness/bench/locustfile.py", "--headless",
                             "-u", "2", "-r", "2", "--host", ref.url, "--only-summary",
                             "--bench-profile", "10-12", "--bench-out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(ref.records()) == 2 or proc.poll() is not None, "both users' requests")
    finally:
        _, err = stop_locust(proc)
    assert proc.returncode in (0, 1), err[-2000:]
    recs = [json.loads(x) for x in next(out.glob("requests-*.jsonl")).read_text().splitlines()]
    assert {r["id"] for r in recs} == set(ref.records()) and len(recs) == 2
    assert all(not r["ok"] and r["error"] == "timeout" and "locust stopped" in r["error_detail"] for r in recs)


def test_master_and_workers_share_one_level_and_the_total_user_count(ref, tmp_path):
    """Distributed: every worker's records carry the master's run id and -u, so summarize sees
    one level of 4 streams with every request, not one 1-stream level per worker."""
    import socket

    ref.configure(ttft_ms=20, itl_ms=5, tokens_per_chunk=1)
    out = tmp_path / "locust"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = [sys.executable, "-m", "locust", "-f", "harness/bench/locustfile.py"]
    workers = [subprocess.Popen(base + ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(2)]
    try:
        # no -t: stopped once the server has requests from both workers (record ids carry the
        # worker's pid), so a busy machine cannot end the run before a worker sent anything
        master = subprocess.Popen(base + ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                                          "--expect-workers", "2", "--headless", "-u", "4", "-r", "4",
                                          "--host", ref.url, "--only-summary", "--bench-profile", "10-12",
                                          "--bench-out", str(out), "--stop-timeout", "5"],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: len({i.rsplit("-", 2)[1] for i in ref.records()}) == 2 or master.poll() is not None,
                     "requests from both workers")
        finally:
            _, err = stop_locust(master)
        for w in workers:
            w.wait(60)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert master.returncode == 0, err[-2000:]
    files = list(out.glob("requests-*.jsonl"))
    assert len(files) == 2  # one per worker process
    recs = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    assert len({r["level_run"] for r in recs}) == 1 and {r["concurrency"] for r in recs} == {4}
    from harness.bench.summarize import summarize_dir
    levels = summarize_dir(out)
    assert len(levels) == 1 and levels[0]["completed"] == len(recs) == len(ref.records())
