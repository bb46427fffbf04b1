"""plan --region: a region that is not one is refused in one line (as harness cost refuses it); a
region the dated snapshot holds no price for is refused without live prices, never shown with
another region's prices under its name; a price from another region is named in the table."""
from __future__ import annotations

import json

import pytest

from harness.cost import placements as cli
from harness.cost.prices import PriceBook, load_snapshot

BAD = [
    ("zz-fake-9", "is not a region botocore"),
    ("../../etc", "is not an AWS region code"),
    ("us-east-1; rm -rf /", "is not an AWS region code"),
    ("", "is not an AWS region code"),
    ("US-EAST-1", "is not an AWS region code"),
    ("mars-north-1", "is not an AWS region code"),
    ("xy-north-1", "is not a region botocore"),
]
NOT_IN_SNAPSHOT = ["eu-west-1", "ap-south-1", "eu-central-1", "us-west-1", "sa-east-1", "cn-north-1",
                   "us-gov-west-1"]


@pytest.mark.parametrize("region, words", BAD)
@pytest.mark.parametrize("json_out", [False, True])
def test_a_region_that_is_not_one_is_one_line_exit_2(region, words, json_out, capsys):
    rc = cli.main(["--model", "E2B", "--region", region, "--offline", *(["--json"] if json_out else [])])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""
    assert cap.err.count("\n") == 1 and cap.err.startswith("plan: --region=") and words in cap.err, cap.err


@pytest.mark.parametrize("region", NOT_IN_SNAPSHOT)
@pytest.mark.parametrize("json_out", [False, True])
def test_offline_a_region_the_snapshot_lacks_is_refused(region, json_out, capsys):
    rc = cli.main(["--model", "E2B", "--region", region, "--offline", *(["--json"] if json_out else [])])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""  # the us-east-1 table is not printed as if it were eu-west-1's
    assert cap.err.count("\n") == 1, cap.err
    assert cap.err.startswith(f"plan: --region {region}: the price snapshot (dated ") and "has no" in cap.err
    assert "us-east-1" in cap.err  # what it does hold


def test_no_credentials_is_the_same_as_offline(monkeypatch, capsys):
    monkeypatch.setattr("harness.cost.prices.has_credentials", lambda: False)
    assert cli.main(["--model", "E2B", "--region", "eu-west-1"]) == 2
    assert "has no eu-west-1 prices" in capsys.readouterr().err


@pytest.mark.parametrize("region", ["us-east-1", "us-east-2", "us-west-2"])
def test_a_snapshot_region_names_every_price_from_another(region, capsys):
    assert cli.main(["--model", "E2B", "--region", region, "--offline"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Fits (smallest first"):]
    snap = load_snapshot()
    for row in snap["instances"]:
        if row["usd_per_hour"] is None:
            continue
        line = next((ln for ln in table.splitlines() if f" {row['instance_type']} " in ln), None)
        if line is None:
            continue
        own = any(r["instance_type"] == row["instance_type"] and r["region"] == region for r in snap["instances"])
        if not own:
            assert f"({row['region']}'s)" in line, line
        else:
            assert "'s)" not in line, line
    if "'s)" in table:
        assert "not the region asked for" in out


def test_json_marks_another_regions_price(capsys):
    assert cli.main(["--model", "E2B", "--region", "us-east-1", "--offline", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    g6 = next(r for r in d["backends"]["g6"]["placements"] if r["instance_type"] == "g6.xlarge")
    assert g6["price_region"] == "us-east-2"  # the snapshot's g6.xlarge row


def test_live_prices_may_price_any_region():
    class Live:
        def instance_hourly(self, itype, region):
            return 1.0

    book = PriceBook(Live(), load_snapshot())
    assert cli.region_problem(book, "eu-west-1") is None
    rows = cli.price_rows({"g6": [cli.kp.plan(cli.kp.choose_model("E2B"), backends=("g6",))["g6"][0]]},
                          book, "eu-west-1")
    assert rows["g6"][0]["usd_per_hour"] == 1.0 and "price_region" not in rows["g6"][0]
