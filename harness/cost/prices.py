"""On-demand prices: the AWS Price List API, with a dated snapshot in the repo as the fallback.

API (used by harness.cost.breakeven, harness.cost.run_cost and harness.run):

    book = PriceBook.auto(offline=False)          # live when credentials exist, else snapshot
    q = book.instance("g6.xlarge", "us-east-1")   # Quote(usd_per_hour=…, source="live"|"snapshot", as_of=…)
    b = book.bedrock("us.amazon.nova-micro-v1:0", "us-east-1")  # Quote(usd_per_m_input/output=…)
    q.label                                       # "live 2026-11-29" / "snapshot 2026-11-29"

``PriceListClient`` speaks to the ``pricing`` service (endpoints only in us-east-1, ap-south-1,
eu-central-1) with ``get_products`` and TERM_MATCH filters, follows ``NextToken`` through the
botocore paginator, and parses the ``PriceList`` items (each a JSON string) down to the OnDemand
``priceDimensions`` → ``pricePerUnit`` → ``USD``:

- EC2: ServiceCode AmazonEC2; instanceType, regionCode, operatingSystem=Linux, tenancy=Shared,
  preInstalledSw=NA, capacitystatus=Used (unit ``Hrs``).
- SageMaker: AmazonSageMaker; instanceName=ml.…, component=Hosting, regionCode (unit ``Hrs``).
- Bedrock: AmazonBedrock; model (e.g. "Nova Micro"), regionCode; rows whose inferenceType is
  "Input tokens" / "Output tokens", on-demand only (batch, cache, flex, priority, provisioned,
  customization and global cross-region rows are other prices); unit ``1K tokens``.

Every Quote says where it came from and when; a failed or impossible live lookup falls back to
the snapshot with a note saying why.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from kit.errors import KitError

SNAPSHOT_PATH = Path(__file__).with_name("price_snapshot.json")
PRICING_ENDPOINT_REGIONS = ("us-east-1", "ap-south-1", "eu-central-1")
HOURLY_UNIT = "hrs"
# Bedrock rows that are not the plain on-demand token price of a model in a region.
_BEDROCK_OTHER = re.compile(
    r"batch|cache|flex|priority|provisioned|reserved|customi[sz]ation|latency|global|long.?context",
    re.IGNORECASE)
_TOKEN_UNITS = {"1k tokens": 1_000.0, "1m tokens": 1.0, "million tokens": 1.0, "tokens": 1_000_000.0}


class PriceError(KitError):
    """A Price List answer that does not hold exactly the one price asked for."""

    exit_code = 1


# -- region code <-> Price List location name -------------------------------------------------
@lru_cache(maxsize=1)
def _region_names() -> dict[str, str]:
    import botocore.loaders

    data = botocore.loaders.create_loader().load_data("endpoints")
    names = {}
    for partition in data["partitions"]:
        for code, info in partition["regions"].items():
            desc = info.get("description", "")
            # botocore says "Europe (Frankfurt)"; the Price List says "EU (Frankfurt)".
            names[code] = re.sub(r"^Europe \(", "EU (", desc)
    return names


def location_for_region(region: str) -> str:
    """Price List ``location`` of a region code: us-east-1 -> "US East (N. Virginia)"."""
    try:
        return _region_names()[region]
    except KeyError:
        raise ValueError(f"unknown AWS region {region!r} (expected e.g. us-east-1)") from None


# -- parsing ----------------------------------------------------------------------------------
def parse_price_list(items: Iterable[str | dict]) -> list[dict]:
    """PriceList entries arrive as JSON strings; a dict is passed through."""
    return [json.loads(i) if isinstance(i, str) else i for i in items]


def on_demand_dimensions(product: dict, currency: str = "USD") -> list[tuple[str, float, str]]:
    """(unit, price, description) of every OnDemand price dimension of one product."""
    out = []
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            raw = dim.get("pricePerUnit", {}).get(currency)
            if raw is None:
                continue
            out.append((str(dim.get("unit", "")), float(raw), str(dim.get("description", ""))))
    return out


def single_hourly_usd(products: list[dict], what: str) -> float:
    """The one non-zero hourly on-demand price among ``products``; PriceError otherwise."""
    prices = {p for prod in products for unit, p, _ in on_demand_dimensions(prod)
              if unit.lower() == HOURLY_UNIT and p > 0}
    if len(prices) != 1:
        found = ", ".join(f"{p:g}" for p in sorted(prices)) or "none"
        raise PriceError(f"{what}: expected one hourly on-demand price, found {found}")
    return prices.pop()


def _ec2_on_demand(product: dict) -> bool:
    attrs = product.get("product", {}).get("attributes", {})
    return (attrs.get("marketoption", "OnDemand") == "OnDemand"
            and attrs.get("licenseModel", "No License required") == "No License required")


def bedrock_token_prices(products: list[dict], what: str) -> tuple[float, float]:
    """(USD per million input tokens, USD per million output tokens) from Bedrock rows."""
    found: dict[str, set[float]] = {"input": set(), "output": set()}
    for prod in products:
        attrs = prod.get("product", {}).get("attributes", {})
        kind = str(attrs.get("inferenceType", "")).strip().lower()
        if kind not in ("input tokens", "output tokens"):
            continue
        if _BEDROCK_OTHER.search(f"{attrs.get('usagetype', '')} {attrs.get('feature', '')}"):
            continue
        for unit, price, _ in on_demand_dimensions(prod):
            scale = _TOKEN_UNITS.get(unit.strip().lower())
            if scale is not None:
                found[kind.split()[0]].add(round(price * scale, 9))
    if len(found["input"]) != 1 or len(found["output"]) != 1:
        raise PriceError(f"{what}: expected one on-demand input and one output token price, "
                         f"found input={sorted(found['input'])} output={sorted(found['output'])}")
    return found["input"].pop(), found["output"].pop()


# -- the API client ---------------------------------------------------------------------------
class PriceListClient:
    """Thin client over ``pricing.get_products``; pass ``client`` to inject a stubbed one."""

    def __init__(self, client: Any = None, endpoint_region: str = "us-east-1"):
        if endpoint_region not in PRICING_ENDPOINT_REGIONS:
            raise ValueError(f"the Price List API has no endpoint in {endpoint_region!r}; "
                             f"valid: {', '.join(PRICING_ENDPOINT_REGIONS)}")
        if client is None:
            import boto3
            from botocore.config import Config

            # Fail fast when offline: a plan should not hang on a dead network.
            client = boto3.client("pricing", region_name=endpoint_region, config=Config(
                connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"}))
        self._client = client

    def products(self, service_code: str, **attributes: str) -> list[dict]:
        filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in attributes.items()]
        out: list[dict] = []
        for page in self._client.get_paginator("get_products").paginate(
                ServiceCode=service_code, Filters=filters, FormatVersion="aws_v1"):
            out += parse_price_list(page.get("PriceList", []))
        return out

    def ec2_hourly(self, instance_type: str, region: str) -> float:
        prods = self.products("AmazonEC2", instanceType=instance_type, regionCode=region,
                              operatingSystem="Linux", tenancy="Shared", preInstalledSw="NA",
                              capacitystatus="Used")
        return single_hourly_usd([p for p in prods if _ec2_on_demand(p)], f"{instance_type} in {region}")

    def sagemaker_hourly(self, instance_type: str, region: str) -> float:
        prods = self.products("AmazonSageMaker", instanceName=instance_type, component="Hosting",
                              regionCode=region)
        return single_hourly_usd(prods, f"SageMaker hosting {instance_type} in {region}")

    def bedrock_tokens(self, price_list_model: str, region: str) -> tuple[float, float]:
        prods = self.products("AmazonBedrock", model=price_list_model, regionCode=region)
        return bedrock_token_prices(prods, f"Bedrock {price_list_model} in {region}")

    def instance_hourly(self, instance_type: str, region: str) -> float:
        if instance_type.startswith("ml."):
            return self.sagemaker_hourly(instance_type, region)
        return self.ec2_hourly(instance_type, region)


# -- snapshot + resolver ----------------------------------------------------------------------
@dataclass(frozen=True)
class Quote:
    """One price and its provenance. ``source`` is "live" or "snapshot"."""

    what: str
    region: str
    source: str
    as_of: str
    usd_per_hour: float | None = None
    usd_per_m_input: float | None = None
    usd_per_m_output: float | None = None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.source} {self.as_of}"

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None or self.usd_per_m_output is not None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")} | {"label": self.label}


def load_snapshot(path: Path = SNAPSHOT_PATH) -> dict:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if "as_of" not in data or "instances" not in data:
        raise ValueError(f"{path}: not a price snapshot (needs as_of and instances)")
    return data


def bedrock_price_list_model(model_id: str, snapshot: dict) -> str | None:
    for row in snapshot.get("bedrock", []):
        if row["model_id"] == model_id or model_id.endswith(row["model_id"].split(".", 1)[-1]):
            return row.get("price_list_model")
    return None


def has_credentials() -> bool:
    try:
        import boto3

        return boto3.Session().get_credentials() is not None
    except Exception:  # noqa: BLE001 - a broken profile is "no usable credentials" here
        return False


@dataclass
class PriceBook:
    """Resolves prices live when a client is given, else (or on failure) from the snapshot."""

    client: PriceListClient | None = None
    snapshot: dict = field(default_factory=load_snapshot)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def auto(cls, offline: bool = False, snapshot: dict | None = None) -> "PriceBook":
        snap = snapshot or load_snapshot()
        if offline:
            return cls(None, snap, [f"offline: prices from the snapshot dated {snap['as_of']}"])
        if not has_credentials():
            return cls(None, snap, [f"no AWS credentials: prices from the snapshot dated {snap['as_of']}"])
        return cls(PriceListClient(), snap)

    @property
    def today(self) -> str:
        return _dt.datetime.now(_dt.timezone.utc).date().isoformat()

    def _snapshot_instance(self, instance_type: str, region: str, why: str = "") -> Quote:
        rows = [r for r in self.snapshot["instances"] if r["instance_type"] == instance_type]
        as_of = self.snapshot["as_of"]
        if not rows:
            return Quote(instance_type, region, "snapshot", as_of,
                         note=f"{why}{instance_type} is not in the snapshot")
        row = next((r for r in rows if r["region"] == region), rows[0])
        note = why + row.get("source", "")
        if row["region"] != region:
            note += f"; snapshot price is for {row['region']}, not {region}"
        return Quote(instance_type, row["region"], "snapshot", as_of,
                     usd_per_hour=row["usd_per_hour"], note=note)

    def instance(self, instance_type: str, region: str) -> Quote:
        if self.client is None:
            return self._snapshot_instance(instance_type, region)
        try:
            usd = self.client.instance_hourly(instance_type, region)
            return Quote(instance_type, region, "live", self.today, usd_per_hour=usd)
        except Exception as e:  # noqa: BLE001 - any API failure: say so and use the snapshot
            self._give_up_if_unreachable(e)
            return self._snapshot_instance(instance_type, region, f"live lookup failed ({_brief(e)}); ")

    def _give_up_if_unreachable(self, e: Exception) -> None:
        """No network or no credentials: stop asking, so each later lookup does not wait again."""
        from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, NoCredentialsError

        if isinstance(e, (EndpointConnectionError, ConnectTimeoutError, NoCredentialsError)):
            self.client = None
            self.notes.append(f"Price List API unreachable ({_brief(e)}): prices from the snapshot "
                              f"dated {self.snapshot['as_of']}")

    def _snapshot_bedrock(self, model_id: str, region: str, why: str = "") -> Quote:
        as_of = self.snapshot["as_of"]
        rows = [r for r in self.snapshot.get("bedrock", []) if r["model_id"] == model_id]
        if not rows:
            return Quote(model_id, region, "snapshot", as_of, note=f"{why}{model_id} is not in the snapshot")
        row = next((r for r in rows if r["region"] == region), rows[0])
        note = why + row.get("source", "")
        if row["region"] != region:
            note += f"; snapshot price is for {row['region']}, not {region}"
        return Quote(model_id, row["region"], "snapshot", as_of, usd_per_m_input=row["usd_per_m_input"],
                     usd_per_m_output=row["usd_per_m_output"], note=note)

    def bedrock(self, model_id: str, region: str) -> Quote:
        name = bedrock_price_list_model(model_id, self.snapshot)
        if self.client is None or name is None:
            why = "" if self.client is None else f"no Price List model name known for {model_id}; "
            return self._snapshot_bedrock(model_id, region, why)
        try:
            usd_in, usd_out = self.client.bedrock_tokens(name, region)
            return Quote(model_id, region, "live", self.today, usd_per_m_input=usd_in, usd_per_m_output=usd_out)
        except Exception as e:  # noqa: BLE001 - any API failure: say so and use the snapshot
            self._give_up_if_unreachable(e)
            return self._snapshot_bedrock(model_id, region, f"live lookup failed ({_brief(e)}); ")


def _brief(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:160]


def refresh_snapshot(client: PriceListClient, snapshot: dict, as_of: str | None = None) -> dict:
    """A new snapshot with every entry re-priced live (same entries, same regions)."""
    out = {**snapshot, "as_of": as_of or _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
           "instances": [], "bedrock": []}
    for row in snapshot["instances"]:
        usd = _named(client.instance_hourly, row["instance_type"], row["region"])
        out["instances"].append({**row, "usd_per_hour": usd, "source": "AWS Price List API"})
    for row in snapshot.get("bedrock", []):
        usd_in, usd_out = _named(client.bedrock_tokens, row["price_list_model"], row["region"])
        out["bedrock"].append({**row, "usd_per_m_input": usd_in, "usd_per_m_output": usd_out,
                               "source": "AWS Price List API"})
    return out


def _named(lookup, what: str, region: str):
    """A refresh is all or nothing: the first entry that cannot be priced stops it, named."""
    try:
        return lookup(what, region)
    except Exception as e:  # noqa: BLE001 - any API failure is one PriceError line
        raise PriceError(f"cannot price {what} in {region} live ({_brief(e)}); the snapshot is unchanged") from None
