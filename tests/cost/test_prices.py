"""Price List parsing and the client, driven through botocore's Stubber on recorded answers."""
from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest
from botocore.stub import Stubber

from harness.cost import prices
from harness.cost.prices import PriceBook, PriceError, PriceListClient

FIX = Path(__file__).parent / "fixtures"


def _load(name):
    return json.loads((FIX / name).read_text())


def _filters(**kv):
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in kv.items()]


@pytest.fixture
def stubbed():
    client = botocore.session.get_session().create_client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    with Stubber(client) as stub:
        yield PriceListClient(client=client), stub
        stub.assert_no_pending_responses()


def test_ec2_hourly_uses_the_documented_filters_and_ignores_reserved_terms(stubbed):
    client, stub = stubbed
    stub.add_response("get_products", _load("ec2_g6.xlarge_us-east-2.json"), {
        "ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
        "Filters": _filters(instanceType="g6.xlarge", regionCode="us-east-2", operatingSystem="Linux",
                            tenancy="Shared", preInstalledSw="NA", capacitystatus="Used")})
    assert client.ec2_hourly("g6.xlarge", "us-east-2") == pytest.approx(0.8048)


def test_ec2_pagination_follows_next_token_and_skips_capacity_blocks(stubbed):
    client, stub = stubbed
    page1, page2 = _load("ec2_p4d.24xlarge_us-east-1_pages.json")
    base = {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
            "Filters": _filters(instanceType="p4d.24xlarge", regionCode="us-east-1", operatingSystem="Linux",
                                tenancy="Shared", preInstalledSw="NA", capacitystatus="Used")}
    stub.add_response("get_products", page1, base)
    stub.add_response("get_products", page2, base | {"NextToken": page1["NextToken"]})
    assert client.ec2_hourly("p4d.24xlarge", "us-east-1") == pytest.approx(21.9576)


def test_sagemaker_hosting_filters(stubbed):
    client, stub = stubbed
    stub.add_response("get_products", _load("sagemaker_ml.g6.xlarge_us-east-2.json"), {
        "ServiceCode": "AmazonSageMaker", "FormatVersion": "aws_v1",
        "Filters": _filters(instanceName="ml.g6.xlarge", component="Hosting", regionCode="us-east-2")})
    assert client.instance_hourly("ml.g6.xlarge", "us-east-2") == pytest.approx(1.1267)


def test_bedrock_tokens_across_pages_pick_plain_on_demand_rows(stubbed):
    client, stub = stubbed
    page1, page2 = _load("bedrock_nova-micro_us-east-1_pages.json")
    base = {"ServiceCode": "AmazonBedrock", "FormatVersion": "aws_v1",
            "Filters": _filters(model="Nova Micro", regionCode="us-east-1")}
    stub.add_response("get_products", page1, base)
    stub.add_response("get_products", page2, base | {"NextToken": page1["NextToken"]})
    usd_in, usd_out = client.bedrock_tokens("Nova Micro", "us-east-1")
    assert (usd_in, usd_out) == (pytest.approx(0.035), pytest.approx(0.14))


def test_ambiguous_or_empty_answers_are_errors_not_guesses():
    page1, page2 = _load("ec2_p4d.24xlarge_us-east-1_pages.json")
    both = prices.parse_price_list(page1["PriceList"] + page2["PriceList"])
    with pytest.raises(PriceError, match="11.8, 21.9576"):
        prices.single_hourly_usd(both, "p4d")  # two prices when capacity blocks are not filtered out
    with pytest.raises(PriceError, match="none"):
        prices.single_hourly_usd([], "nothing")


def test_live_failure_falls_back_to_the_snapshot_with_a_note(stubbed):
    client, stub = stubbed
    stub.add_client_error("get_products", service_error_code="AccessDeniedException",
                          service_message="not authorized to perform: pricing:GetProducts")
    q = PriceBook(client).instance("g6.xlarge", "us-east-2")
    assert (q.source, q.usd_per_hour) == ("snapshot", 0.8048)
    assert "AccessDenied" in q.note and q.label == f"snapshot {prices.load_snapshot()['as_of']}"


def test_snapshot_region_mismatch_is_said_and_unknown_types_are_unpriced():
    book = PriceBook.auto(offline=True)
    q = book.instance("g6.xlarge", "eu-west-1")
    assert q.usd_per_hour == 0.8048 and "not eu-west-1" in q.note
    assert book.instance("x9.metal", "us-east-1").usd_per_hour is None
    assert book.instance("ml.g7e.12xlarge", "us-east-1").known is False


def test_snapshot_covers_the_backends_and_the_seed_sizes():
    from kit import catalog
    snap = prices.load_snapshot()
    types = {r["instance_type"] for r in snap["instances"]}
    needed = {b.instance_type for b in catalog.BACKENDS.values() if b.instance_type}
    needed |= {"ml.g5.12xlarge", "ml.g6.12xlarge", "ml.g6e.12xlarge", "ml.g7e.12xlarge",
               "inf2.48xlarge", "g5.12xlarge", "p4d.24xlarge"}
    assert needed <= types
    assert all(r.get("source") and r.get("region") for r in snap["instances"])


def test_region_location_names():
    assert prices.location_for_region("us-east-1") == "US East (N. Virginia)"
    assert prices.location_for_region("eu-central-1") == "EU (Frankfurt)"
    assert prices.location_for_region("eu-west-1") == "EU (Ireland)"
    with pytest.raises(ValueError, match="unknown AWS region"):
        prices.location_for_region("mars-north-1")


def test_pricing_endpoint_regions_are_checked():
    with pytest.raises(ValueError, match="ap-south-1"):
        PriceListClient(client=object(), endpoint_region="us-west-2")


def test_refresh_snapshot_reprices_every_entry():
    class Fake:
        def instance_hourly(self, t, r):
            return 1.0

        def bedrock_tokens(self, m, r):
            return 0.01, 0.02
    new = prices.refresh_snapshot(Fake(), prices.load_snapshot(), as_of="2027-01-01")
    assert new["as_of"] == "2027-01-01"
    assert all(r["usd_per_hour"] == 1.0 and r["source"] == "AWS Price List API" for r in new["instances"])
    assert new["bedrock"][0]["usd_per_m_output"] == 0.02


def test_unreachable_api_stops_live_lookups_after_the_first_failure():
    from botocore.exceptions import EndpointConnectionError

    class Dead:
        calls = 0

        def instance_hourly(self, t, r):
            Dead.calls += 1
            raise EndpointConnectionError(endpoint_url="https://api.pricing.us-east-1.amazonaws.com/")

    book = PriceBook(Dead())
    first = book.instance("g6.xlarge", "us-east-2")
    second = book.instance("inf2.xlarge", "us-east-2")
    assert Dead.calls == 1 and book.client is None
    assert first.source == second.source == "snapshot" and "unreachable" in book.notes[-1]


def test_refresh_stops_at_the_first_entry_it_cannot_price_and_names_it():
    class Partial:
        def instance_hourly(self, t, r):
            if t == "inf2.xlarge":
                raise PriceError(f"{t} in {r}: expected one hourly on-demand price, found none")
            return 1.0

        def bedrock_tokens(self, m, r):
            return 0.01, 0.02
    with pytest.raises(PriceError, match=r"cannot price inf2.xlarge in us-east-2 live .*found none"):
        prices.refresh_snapshot(Partial(), prices.load_snapshot())
