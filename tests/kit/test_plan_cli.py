"""python -m harness plan: what fits where, one line per misfit, prices labelled, --json for scripts."""
from __future__ import annotations

import json

from harness.cost import placements as cli


def rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The fits table: (backend, instance) -> the row's cells."""
    table = out.partition("Fits (smallest first per backend):")[2].partition("\n\n")[0].splitlines()[3:]
    return {(r.split()[0], r.split()[1]): r.split() for r in table}


def run(capsys, *argv):
    code = cli.main([*argv, "--offline"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_31b_names_where_it_fits_and_refuses_the_rest(capsys):
    code, out, _ = run(capsys, "--model", "31B")
    assert code == 0
    fits, _, rest = out.partition("Does not fit / cannot serve:")
    table = rows(out)
    assert table[("g6", "g7e.2xlarge")][2] == "1"
    # g6e.12xlarge: TP 4, 55 tok/s ceiling, 10.6032 $/h (snapshot): $53.324 per M output tokens at best
    # (10.6032 / (4 x 864e9 / 62,569,106,432 tok/s x 3600 s) x 1e6).
    assert table[("g6", "g6e.12xlarge")][2:9] == ["4", "17.8", "GB", "43.2", "GB", "55", "10.6032"]
    assert table[("g6", "g6e.12xlarge")][9] == "53.324"
    assert ("g6", "g6.xlarge") not in table
    assert ("  g6 g6.xlarge: 61.4 GB weights / TP 1 + 1.2 GB KV + 2 GiB runtime = 64.7 GB per GPU > 21.6 GB"
            in rest)
    assert "  bedrock: managed" in rest
    assert "RTX PRO 6000 Blackwell Server Edition 96 GB GDDR7 1597 GB/s, native bf16 fp16 fp8 int8 int4" in fits
    assert "inf2 inf2.xlarge: Neuron engine:" in rest  # the engine's own refusal, with its numbers
    assert "inf2 inf2.48xlarge: fits, but only contrib PR #106's port serves 31B" in rest


def test_e2b_lists_the_kit_packages_where_they_load(capsys):
    _, out, _ = run(capsys, "--model", "E2B", "--backends", "g6,g5g")
    table = rows(out)
    # E2B bf16 on g6.xlarge: 64.75 tok/s at 0.8048 $/h is $3.452 per M output tokens.
    assert table[("g6", "g6.xlarge")][8:10] == ["0.8048", "3.452"]
    assert "package:emb4," in table[("g6", "g6.xlarge")] and not any("package" in c for c in table[("g5g", "g5g.xlarge")])


def test_json_for_scripts(capsys):
    code, out, _ = run(capsys, "--model", "google/gemma-4-26B-A4B-it", "--concurrency", "16", "--json")
    data = json.loads(out)
    assert code == 0 and data["model"]["active_params"] < 4e9 < data["model"]["total_params"]
    rows = {r["instance_type"]: r for r in data["backends"]["sagemaker"]["placements"]}
    assert rows["ml.g7e.2xlarge"]["fits"] and not rows["ml.g6.xlarge"]["fits"]
    assert rows["ml.g6.xlarge"]["price"]["label"].startswith("snapshot")


def test_bad_input_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "--model", "40B")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "valid sizes: E2B" in err
    code, _, err = run(capsys, "--model", "E2B", "--backends", "g7")
    assert code == 2 and "unknown backend 'g7'" in err


def test_config_json_path(tmp_path, capsys):
    from kit.models import TEXT_CONFIGS
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"text_config": TEXT_CONFIGS["E4B"]}))
    code, out, _ = run(capsys, "--model", str(p), "--backends", "g6")
    assert code == 0 and ("g6", "g6.xlarge") in rows(out)


def test_make_run_offline_plan_checks_the_configured_model():
    import json as _json
    from pathlib import Path

    from harness.cost.placements import configured_fit_lines
    from harness.run.cli import offline_plan_text

    defaults = "\n".join(configured_fit_lines())
    assert "g6          g6.xlarge        google/gemma-4-E2B-it-qat-w4a16-ct (int4): fits, TP 1" in defaults
    assert "g5g         g5g.2xlarge      google/gemma-4-E2B-it (fp16): fits" in defaults
    ctx = _json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]
    big = "\n".join(configured_fit_lines({**ctx, "model": "google/gemma-4-31B-it", "backends": "g6"}))
    assert "g6.xlarge        google/gemma-4-31B-it (bf16): DOES NOT FIT: 61.4 GB weights" in big
    assert big.endswith("smallest that fits: g7e.2xlarge")
    assert "model fit (kit/fit.py" in offline_plan_text()


def test_make_run_offline_plan_says_synth_refuses_a_type_the_catalog_lacks():
    from harness.cost.placements import configured_fit_lines

    lines = configured_fit_lines({"backends": "g6", "g6_instance_type": "g4dn.xlarge"})
    row = next(ln for ln in lines if "g4dn.xlarge" in ln)
    assert "REFUSED" in row and "no GPU count or memory in the catalog" in row


def test_e2b_on_neuron_reads_the_ports_whole_cache_per_token(capsys):
    """The Neuron rows' ceiling counts what the engine reads: every layer's K/V at the compiled
    length (0.176 GB at 4096), not the 0.073 GB an ideal engine would (sliding layers capped)."""
    _, out, _ = run(capsys, "--model", "E2B", "--backends", "inf2")
    assert ("one token reads 4.56 GB + 0.073 GB of K/V (on the Neuron engine 0.176 GB: every layer's cache "
            "at the compiled length, whatever the token bucket)") in out
    assert rows(out)[("inf2", "inf2.xlarge")][2:6] == ["2", "4.8", "GB", "14.6"]
    assert rows(out)[("inf2", "inf2.xlarge")][7] == "173"
    _, gpu, _ = run(capsys, "--model", "E2B", "--backends", "g6")
    assert "on the Neuron engine" not in gpu
