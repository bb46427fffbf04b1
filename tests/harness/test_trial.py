"""The agent trial through ``harness.run``: a real Strands agent against local OpenAI-compatible
servers playing scripted models (streaming SSE with tool_calls, as vLLM does)."""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import boto3
import pytest

from harness.run import cli as run
from harness.agent import count_ids as cid
from harness.results import read_jsonl
from tests.conftest import sigint_as_a_terminal_would, saved_levels
from tests.harness.fake_openai import SCRIPTS, FakeOpenAI, text_only, throttle_first
from tests.harness.servers import free_port


@contextlib.contextmanager
def servers(**scripts):
    started = {}
    try:
        for name, script in scripts.items():
            started[name] = FakeOpenAI(script).start()
        yield started
    finally:
        for s in started.values():
            s.stop()


def _run(tmp_path, argv, **kw):
    lines: list[str] = []
    rc = run.main(argv + ["--results", str(tmp_path / "results"), "--json", str(tmp_path / "out.json")],
                  session=boto3.Session(region_name="us-east-1"), echo=lines.append, **kw)
    out = json.loads((tmp_path / "out.json").read_text()) if (tmp_path / "out.json").exists() else None
    return rc, lines, out


def _by_backend(out):
    runs = {}
    for r in out["agent_runs"]:
        runs.setdefault(r["backend"], []).append(r)
    return runs


def test_scoring_against_scripted_models(tmp_path, no_aws):
    down = free_port()  # nothing listens there
    with servers(good=SCRIPTS["good"], wrong=SCRIPTS["wrong-filter"], notool=SCRIPTS["no-tool"],
                 malformed=SCRIPTS["malformed"]) as s:
        argv = ["--only", "agent", "--runs", "2",
                "--endpoint", f"good={s['good'].base_url}",
                "--endpoint", f"down=http://127.0.0.1:{down}/v1", "--model", "down=fake/model",
                "--endpoint", f"wrong={s['wrong'].base_url}",
                "--endpoint", f"notool={s['notool'].base_url}",
                "--endpoint", f"malformed={s['malformed'].base_url}"]
        rc, lines, out = _run(tmp_path, argv)
        tool_requests = s["good"].requests
    assert rc == 0
    runs = _by_backend(out)
    # right filter and quote -> ok, both runs, with tokens and the raw answer kept
    assert [r["ok"] for r in runs["good"]] == [True, True]
    g = runs["good"][0]
    assert g["quoted"] == 8 and g["filters"] == ["id >= 10"] and g["mode"] == "tools"
    assert g["output_tokens"] and g["input_tokens"] and "Answer: 8" in g["answer"]
    assert g["tool_calls"] == [{"name": "count_ids", "input": {"filters": ["id >= 10"]}}]
    # the request Strands sent is the one vLLM sees: streaming, usage, the tool as a function
    first = tool_requests[0]
    assert first["stream"] is True and first["tools"][0]["function"]["name"] == "count_ids"
    # server down -> one error recorded, remaining runs skipped, the next backends still ran
    assert len(runs["down"]) == 1 and runs["down"][0]["error"] and not runs["down"][0]["ok"]
    assert any("down       skipping runs 2-2: backend unreachable" == ln for ln in lines)
    # right quote, wrong filter (id > 10 also counts 8 on this table) -> not ok
    assert all(r["quoted"] == 8 and r["filters"] == ["id > 10"] and not r["ok"] for r in runs["wrong"])
    # no tool call -> not ok even though it quotes 8
    assert all(r["quoted"] == 8 and r["filters"] == [] and r["tool_calls"] == [] and not r["ok"]
               for r in runs["notool"])
    # malformed tool arguments -> not ok, no crash, the call is on record
    assert all(not r["ok"] and r["error"] is None and r["tool_calls"][0]["name"] == "count_ids"
               for r in runs["malformed"])
    # one line per run, as in the seed
    good = [ln for ln in lines if ln.startswith("good       run 1/2")]
    assert len(good) == 1 and re.fullmatch(r"good       run 1/2  ok   quoted=8  filters=\['id >= 10'\]  \d+\.\d\ds",
                                           good[0]), lines
    assert any(re.fullmatch(r"wrong      run 2/2  FAIL quoted=8  filters=\['id > 10'\]  .*", ln) for ln in lines)
    # every run was written to the JSONL as it finished, the same records as --json
    jsonl = list(read_jsonl(next((tmp_path / "results").iterdir()) / "agent_runs.jsonl"))
    assert [(r["backend"], r["run"], r["ok"]) for r in jsonl] == \
        [(r["backend"], r["run"], r["ok"]) for r in out["agent_runs"]]
    assert out["stages"]["agent"] == "ok (2/9 runs passed)"


def test_throttling_backs_off_and_plain_variant(tmp_path, no_aws):
    with servers(busy=throttle_first(SCRIPTS["good"]), plain=SCRIPTS["plain"],
                 plainwrong=text_only("Answer: 7")) as s:
        argv = ["--only", "agent", "--runs", "1", "--endpoint", f"busy={s['busy'].base_url}",
                "--endpoint", f"plain={s['plain'].base_url}", "--plain", "plain",
                "--endpoint", f"plainwrong={s['plainwrong'].base_url}", "--plain", "plainwrong"]
        rc, lines, out = _run(tmp_path, argv, retry_initial_delay=0.05)
        plain_prompt = s["plain"].requests[0]
    runs = _by_backend(out)
    assert rc == 0
    assert runs["busy"][0]["ok"] and runs["busy"][0]["throttled"] == 1
    assert runs["plain"][0]["ok"] and runs["plain"][0]["mode"] == "plain" and runs["plain"][0]["filters"] is None
    assert runs["plainwrong"][0]["quoted"] == 7 and not runs["plainwrong"][0]["ok"]
    assert not plain_prompt.get("tools")  # the plain-text variant offers no tool
    assert any("plain-text variant" in ln for ln in lines if ln.startswith("plain "))


def test_timeout_is_recorded_and_next_backend_runs(tmp_path, no_aws):
    # The slow model stalls for 60 s (or until stopped), so its run can only end by the timeout;
    # 3 s is ample for a fast run (two model calls and a tool call, ~0.1 s on a quiet machine)
    # even when the machine is busy. An ignored timeout gives a finished run after 60 s: a failure.
    slow = FakeOpenAI(text_only("one two three four five six seven eight Answer: 8"), stall=60).start()
    fast = FakeOpenAI(SCRIPTS["good"]).start()
    try:
        rc, lines, out = _run(tmp_path, ["--only", "agent", "--runs", "3", "--timeout", "3",
                                         "--endpoint", f"slow={slow.base_url}", "--endpoint", f"fast={fast.base_url}"])
    finally:
        slow.stop()
        fast.stop()
    runs = _by_backend(out)
    assert runs["slow"][0]["error"] == "timed out" and len(runs["slow"]) == 1
    assert 3 <= runs["slow"][0]["seconds"] < 6, runs["slow"][0]  # ended by the timeout, not by the stall
    assert [r["ok"] for r in runs["fast"]] == [True, True, True], lines


def test_ctrl_c_keeps_what_was_written_and_closes_tunnels(tmp_path, fake_aws):
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({"G6Stack": {
        "BackendId": "g6", "Service": "ec2", "Region": "us-east-1", "ModelId": "fake/model",
        "InstanceType": "g6.xlarge", "InstanceId": "i-0123456789abcdef0", "Port": "8000", "SshUser": "ubuntu"}}))
    opened, closed = [], []
    with servers(g6=SCRIPTS["good"]) as s:
        @contextlib.contextmanager
        def fake_tunnel(ep):
            opened.append((ep.instance_id, ep.port, ep.ssh_user))
            try:
                yield ep.with_base_url(s["g6"].base_url)
            finally:
                closed.append(ep.name)

        seen = []

        def echo(line):
            seen.append(line)
            if line.startswith("g6         run 1/3"):
                raise KeyboardInterrupt

        rc = run.main(["--outputs-file", str(outputs), "--only", "agent", "--results", str(tmp_path / "r"),
                       "--json", str(tmp_path / "out.json")],
                      session=boto3.Session(region_name="us-east-1"), echo=echo, open_access=fake_tunnel)
    assert rc == 130
    assert opened == [("i-0123456789abcdef0", 8000, "ubuntu")] and closed == ["g6"]
    run_dir = next((tmp_path / "r").iterdir())
    kept = list(read_jsonl(run_dir / "agent_runs.jsonl"))
    assert len(kept) == 1 and kept[0]["ok"] and kept[0]["backend"] == "g6"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["interrupted"] is True and meta["endpoints"][0]["instance_id"] == "i-0123456789abcdef0"
    assert json.loads((tmp_path / "out.json").read_text())["interrupted"] is True


def test_access_failure_recorded_and_next_backend_runs(tmp_path, fake_aws):
    outputs = tmp_path / "cdk-outputs.json"
    ec2 = {"Service": "ec2", "Region": "us-east-1", "ModelId": "fake/model", "Port": "8000"}
    outputs.write_text(json.dumps({
        "G6Stack": {**ec2, "BackendId": "g6", "InstanceType": "g6.xlarge", "InstanceId": "i-0aaaaaaaaaaaaaaaa"},
        "Inf2Stack": {**ec2, "BackendId": "inf2", "InstanceType": "inf2.xlarge", "InstanceId": "i-0bbbbbbbbbbbbbbbb"},
        "NetworkStack": {"VpcId": "vpc-1"}}))
    with servers(inf2=SCRIPTS["good"]) as s:
        @contextlib.contextmanager
        def tunnel(ep):
            if ep.name == "g6":
                raise RuntimeError("instance i-0aaaaaaaaaaaaaaaa is stopped")
            yield ep.with_base_url(s["inf2"].base_url)

        rc, lines, out = _run(tmp_path, ["--outputs-file", str(outputs), "--only", "agent", "--runs", "1"],
                              open_access=tunnel)
    runs = _by_backend(out)
    assert rc == 0
    assert "access failed: instance i-0aaaaaaaaaaaaaaaa is stopped" in runs["g6"][0]["error"]
    assert runs["inf2"][0]["ok"]
    meta = json.loads((next((tmp_path / "results").iterdir()) / "meta.json").read_text())
    assert meta["access"]["g6"].startswith("access failed") and "Instance Connect" in meta["access"]["inf2"]
    # an --endpoint may not reuse a deployed backend's name (results would collide)
    rc = run.main(["--outputs-file", str(outputs), "--endpoint", "g6=http://127.0.0.1:9/v1", "--model", "m"],
                  session=boto3.Session(region_name="us-east-1"), echo=lambda s: None)
    assert rc == 2


def test_count_ids_grammar_never_evaluates():
    assert cid.count(["id >= 10"])["count"] == 8 == cid.count(["id > 10"])["count"]
    assert cid.count(["id>=10", "id < 20"])["count"] == 4
    for bad in ["__import__('os').system('true')", "id >= 10 or 1", "name == 3", "id => 10", "id >= 1.5"]:
        with pytest.raises(cid.FilterError):
            cid.count([bad])
    assert cid.is_expected_filters(["id>=10"]) and not cid.is_expected_filters(["id >= 10", "id >= 0"])
    assert not cid.is_expected_filters(["id > 10"]) and not cid.is_expected_filters(["id >= 9"])
    with pytest.raises(cid.FilterError):  # not a ValueError from int() of 5,000 digits
        cid.count(["id >= " + "9" * 5000])
    assert cid.quoted_number("1" * 5000 + " and then Answer: 8") == 8
    assert cid.quoted_number("1" * 5000) is None
    assert cid.quoted_number("Of the 11 ids, 8 are >= 10.") == 8
    assert cid.quoted_number("eight of them") == 8
    assert cid.quoted_number("Either 7 or 8.") is None
    assert cid.quoted_number("I think 7.\nAnswer: 8") == 8
    assert cid.quoted_number("There are **8**: ids 11, 12, 15, 18, 21, 24, 27 and 30.") == 8
    assert cid.quoted_number("There are 7: ids 11, 12, 15, 18, 21, 24 and 27.") is None
    assert cid.quoted_number("No idea.") is None
    # a number is all of its digits: never the 8 of 88.5 or 18, never 8.5 read as 8
    assert cid.quoted_number("There are 88.5 records.") is None
    assert cid.quoted_number("Answer: 8.5") is None and cid.quoted_number("Answer: 18") == 18
    assert cid.quoted_number("Answer: 8.") == 8
    assert cid.EXPECTED_COUNT not in {r["id"] for r in cid.RECORDS}


def test_full_run_every_stage_from_saved_results(tmp_path, no_aws):
    """agent -> scoreboard (injected orchestrator) -> bench -> cost (offline snapshot) -> report,
    all against local servers; every stage leaves its file in the run directory."""
    from tests.harness.test_aws_paths import FakeBedrockRuntime, _has_tool_result, text, tool_use
    from harness.agent.providers import build_model
    from harness.endpoint import Endpoint

    def script(request, n):
        if not _has_tool_result(request):
            return tool_use([("ask_local", {"question": "What is the capital of France?"})])
        return text("done")

    orchestrator = build_model(Endpoint("scoreboard", "bedrock", "us.amazon.nova-micro-v1:0", region="us-east-1"),
                               client=FakeBedrockRuntime(script))
    with servers(local=SCRIPTS["good"]) as s:
        rc, lines, out = _run(tmp_path, ["--runs", "1", "--endpoint", f"local={s['local'].base_url}",
                                         "--concurrency", "1,2", "--requests", "4"],
                              orchestrator=orchestrator)
    assert rc == 0, lines
    run_dir = next((tmp_path / "results").iterdir())
    assert out["stages"]["agent"] == "ok (1/1 runs passed)"
    assert out["stages"]["bench"] == "ok (1/1 endpoints)" and out["stages"]["cost"] == "ok"
    assert out["stages"]["report"] == "ok" and out["stages"]["scoreboard"] == "ok"
    assert out["scoreboard"]["rows"][0]["backend"] == "local" and out["scoreboard"]["rows"][0]["error"] is None
    for f in ("meta.json", "agent_runs.jsonl", "scoreboard.json", "bench/local/summary.json",
              "bench/local/requests.jsonl", "cost.json", "report.md", "report.html"):
        assert (run_dir / f).exists(), f
    # every results file carries its contract's schema_version first (kit/contracts/results.py)
    from kit.contracts.results import FILES, VERSION_KEY

    versions = {Path(f.name).name: f.version for f in FILES}
    for path in sorted(p for p in run_dir.rglob("*") if p.suffix in (".json", ".jsonl", ".csv")):
        if path.suffix == ".csv":
            header, first = path.read_text().splitlines()[:2]
            assert header.split(",")[0] == VERSION_KEY and first.split(",")[0] == str(versions[path.name])
            continue
        docs = [json.loads(line) for line in path.read_text().splitlines()] if path.suffix == ".jsonl" \
            else [json.loads(path.read_text())]
        assert docs and all(list(d)[0] == VERSION_KEY and d[VERSION_KEY] == versions[path.name] for d in docs), path
    levels = saved_levels(run_dir / "bench/local/summary.json")
    assert [lv["concurrency"] for lv in levels] == [1, 2] and all(lv["completed"] == 4 for lv in levels)
    # the path's round trip, measured before the levels, is in every level and in the run's meta
    path = json.loads((run_dir / "meta.json").read_text())["bench"]["local"]["path_rtt_ms"]
    assert path["n"] == 20 and path["p50"] > 0 and all(lv["path_rtt_ms"] == path for lv in levels)


def test_bad_input_is_one_line_exit_2(capsys):
    for argv, needle in [(["--only", "agent,bogus"], "--only 'bogus' is not a stage"),
                         (["--endpoint", "nourl"], "--endpoint 'nourl': expected NAME=URL"),
                         (["--runs", "0"], "--runs 0: must be >= 1"),
                         (["--backends", "g7"], "unknown backend 'g7'"),
                         (["--concurrency", "1,x"], "comma-separated"),
                         (["--bench-profile", "nope"], "--profile 'nope': use one of agent"),
                         (["--frobnicate"], "unrecognized arguments")]:
        assert run.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("harness.run: ") and needle in err[0], err


def test_real_sigint_keeps_results(tmp_path, no_aws):
    """A real Ctrl-C (SIGINT) to a running ``python -m harness.run``: exit 130, every finished
    run still in agent_runs.jsonl, meta.json marked interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    slow = FakeOpenAI(SCRIPTS["good"], token_delay=0.15).start()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "harness.run", "--only", "agent", "--runs", "20",
                                 "--endpoint", f"slow={slow.base_url}", "--results", str(tmp_path / "r")],
                                cwd=root, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=sigint_as_a_terminal_would)
        deadline = time.time() + 120  # a wait, not a bound: the first run took 19 s on the busy machine
        jsonl = None
        while time.time() < deadline:
            found = list((tmp_path / "r").glob("*/agent_runs.jsonl"))
            if found and found[0].read_text().count("\n") >= 1:
                jsonl = found[0]
                break
            time.sleep(0.1)
        assert jsonl is not None, "no run finished"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # a Ctrl-C that was lost would end with rc 0, not here
    finally:
        slow.stop()
    assert proc.returncode == 130, err
    assert "interrupted: everything measured so far is in" in out
    kept = list(read_jsonl(jsonl))
    assert 1 <= len(kept) < 20 and all(r["ok"] for r in kept)
    assert len(jsonl.read_text().splitlines()) == len(kept)  # no torn line
    meta = json.loads((jsonl.parent / "meta.json").read_text())
    assert meta["interrupted"] is True and "ended_at" in meta
