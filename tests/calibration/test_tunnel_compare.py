"""The tunnel measurement's comparison: medians over interleaved rounds, the limits
(``TARGET``), the Markdown the README carries (pure functions over hand-made rows)."""
from __future__ import annotations

from pathlib import Path

from harness.calibration.tunnel import compare, markdown, misses


def _row(path, conc, rnd, ttft99, itl50, itl99, tok, cli=20.0, fwd=None):
    return {"path": path, "concurrency": conc, "round": rnd, "completed": 8, "failed": 0,
            "ttft_ms": {"p50": 50.0, "p99": ttft99}, "itl_ms": {"p50": itl50, "p99": itl99},
            "output_tok_s": tok, "client_cpu_us_per_chunk": cli, "forwarder_cpu_us_per_chunk": fwd}


ROWS = [  # round 2 of direct is an outlier the median must ignore
    _row("direct", 64, 1, 52.0, 2.00, 4.0, 20000), _row("tunnel-openssh", 64, 1, 54.0, 1.95, 5.0, 19900, fwd=12),
    _row("direct", 64, 2, 90.0, 0.50, 40.0, 10000), _row("tunnel-openssh", 64, 2, 55.0, 1.90, 6.5, 19800, fwd=13),
    _row("direct", 64, 3, 53.0, 2.10, 4.5, 20200), _row("tunnel-openssh", 64, 3, 56.0, 2.00, 5.5, 19700, fwd=11),
]


def test_compare_uses_medians_over_rounds():
    (c,) = compare(ROWS)
    assert c["path"] == "tunnel-openssh" and c["concurrency"] == 64
    assert c["ttft_p99_ms"] == 2.0              # 55 - 53
    assert c["itl_p99_ms"] == 1.0               # 5.5 - 4.5
    assert c["itl_p50_ratio"] == round(1.95 / 2.00, 4)
    assert c["output_tok_s_rel"] == round(19800 / 20000 - 1, 4)
    assert c["misses"] == []


def test_each_limit_is_named_when_exceeded():
    ok = {"output_tok_s_rel": -0.019, "ttft_p99_ms": 2.9, "itl_p99_ms": 1.9, "itl_p50_ratio": 0.91}
    assert misses(ok) == []
    bad = {"output_tok_s_rel": -0.021, "ttft_p99_ms": 3.1, "itl_p99_ms": 2.1, "itl_p50_ratio": 0.0}
    assert misses(bad) == ["tok/s within 2%", "TTFT p99 within +3 ms", "ITL p99 within +2 ms", "ITL p50 within 10%"]


def test_markdown_has_a_column_per_path_and_a_verdict_per_comparison():
    md = markdown({"levels": ROWS, "tunnel_vs_direct": compare(ROWS)})
    assert "| 64 streams (median of 3 rounds) | direct | tunnel-openssh |" in md
    assert "| output tok/s | 20,000 | 19,800 |" in md
    assert "| CPU µs per chunk: load generator / forwarder | 20 / - | 20 / 12 |" in md
    assert md.splitlines()[-1].endswith("tok/s -1.0%: meets the target")


def test_forwarder_cpu_is_none_where_there_is_no_proc(monkeypatch):
    """No /proc (macOS): the forwarder's CPU is unknown, not a crash."""
    from pathlib import Path

    from harness.calibration import tunnel

    def no_proc(self, *a, **k):
        raise FileNotFoundError(str(self))

    monkeypatch.setattr(Path, "read_text", no_proc)
    assert tunnel._proc_cpu_s(1) is None
    assert tunnel._proc_cpu_s(None) is None


def test_render_a_saved_result_and_refuse_anything_else(tmp_path, capsys):
    """--render re-renders a saved --json result offline (docs/measurements/); anything else is
    one line naming the file, exit 2."""
    import json

    from harness.calibration.tunnel import main

    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"reference": {"ttft_ms": 50, "itl_ms": 2, "output_tokens": 64,
                                               "requests_per_level": 512}, "levels": ROWS}))
    assert main(["--render", str(saved)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Reference server: TTFT 50 ms, 2 ms per token, 64 tokens; 512 requests per level.")
    assert "tok/s -1.0%: meets the target" in out
    bad = tmp_path / "notes.md"
    bad.write_text("# not json")
    assert main(["--render", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "not a saved --json result" in err


def test_every_saved_measurement_renders_and_a_new_one_carries_its_version(capsys):
    """docs/measurements/tunnel-*.json were saved before schema_version: each still renders, with
    no note; a result saved today (``--json``) starts with its contract's version."""
    import json

    from harness.calibration.tunnel import main
    from kit.contracts.results import TUNNEL_CALIBRATION

    saved = sorted((Path(__file__).resolve().parents[2] / "docs" / "measurements").glob("tunnel-*.json"))
    assert len(saved) >= 5
    for path in saved:
        assert "schema_version" not in json.loads(path.read_text())
        assert main(["--render", str(path)]) == 0, path
        out, err = capsys.readouterr()
        assert out.startswith("Reference server:") and err == "", path
    fresh = TUNNEL_CALIBRATION.stamp({"reference": None, "levels": ROWS, "tunnel_vs_direct": []})
    assert list(fresh)[0] == "schema_version" and TUNNEL_CALIBRATION.read(fresh, "x", []) == fresh
