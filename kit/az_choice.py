"""Which Availability Zone offers the instance types a backend or an image build needs, and the
/24 its subnet gets there: the decision behind Custom::AzChoice (stacks/lambdas/az_choice), made
the same way by preflight (harness/account/preflight*.py) before anything is deployed.

Standard library only, no import from the rest of the kit: stacks/lambda_code.py ships this file
(with kit/__init__.py) in the Lambda's asset, where only the Lambda Python runtime is present.
Only ``ec2:DescribeInstanceTypeOfferings`` and ``ec2:DescribeAvailabilityZones`` are called, on
the client the caller passes.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

MAX_LETTERS = 8  # AZ letters a..h per CIDR block of 8 /24s


class ChoiceError(Exception):
    """No AZ can be chosen; str(e) is the one line CloudFormation shows."""


def available_zones(ec2: Any) -> list[str]:
    """Names of the region's available AZs (not Local or Wavelength Zones), sorted."""
    zones = ec2.describe_availability_zones(
        Filters=[{"Name": "state", "Values": ["available"]}])["AvailabilityZones"]
    return sorted(z["ZoneName"] for z in zones
                  if z.get("ZoneType", "availability-zone") == "availability-zone"
                  and z.get("OptInStatus", "opt-in-not-required") != "not-opted-in")


def offerings(ec2: Any, instance_types: Iterable[str]) -> dict[str, set[str]]:
    """Instance type -> the AZ names offering it (DescribeInstanceTypeOfferings, paginated)."""
    types = list(instance_types)
    out: dict[str, set[str]] = {t: set() for t in types}
    kwargs: dict[str, Any] = {"LocationType": "availability-zone",
                              "Filters": [{"Name": "instance-type", "Values": types}]}
    while True:
        page = ec2.describe_instance_type_offerings(**kwargs)
        for o in page.get("InstanceTypeOfferings", []):
            out.setdefault(o["InstanceType"], set()).add(o["Location"])
        if not page.get("NextToken"):
            return out
        kwargs["NextToken"] = page["NextToken"]


def choose(region: str, zones: list[str], offered: Mapping[str, set[str]], preferred: str = "",
           previous: str = "") -> tuple[str, list[str]]:
    """(chosen AZ, every AZ that offers all the types). Raises ChoiceError."""
    types = list(offered)
    fit = [z for z in zones if all(z in offered[t] for t in types)]
    if not fit:
        missing = [t for t in types if not offered[t] & set(zones)]
        if missing:
            raise ChoiceError(f"{missing[0]} is offered in no Availability Zone of {region} in this account; "
                              f"move the backend with -c <id>_region=<a region that offers it> or pick another type")
        raise ChoiceError(f"no Availability Zone of {region} offers all of {', '.join(types)}; "
                          + "; ".join(f"{t}: {', '.join(sorted(offered[t])) or 'none'}" for t in types))
    if preferred:
        if preferred not in fit:
            raise ChoiceError(f"{preferred} does not offer {', '.join(types)} in this account; "
                              f"AZs that do: {', '.join(fit)} (set -c <id>_az to one of them, or drop it)")
        return preferred, fit
    if previous in fit:
        return previous, fit
    return fit[0], fit


def cidr_block(prefix: str, base: int, az: str) -> str:
    index = ord(az[-1]) - ord("a")
    if not 0 <= index < MAX_LETTERS:
        raise ChoiceError(f"{az}: the kit numbers subnets for AZ letters a-h only")
    return f"{prefix}.{base + index}.0/24"
