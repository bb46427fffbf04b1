"""Custom resource Custom::AzChoice: the Availability Zone, in this account, that offers the
instance types a backend or an image build needs, and the /24 its subnet gets there.

CloudFormation cannot ask EC2 which AZs offer a type, and AZ names map to different physical
zones in each account, so a template that says "the region's first AZ" fails where that zone
lacks the type ("Unsupported ... in the requested Availability Zone"). This function asks
``DescribeInstanceTypeOfferings`` with ``LocationType=availability-zone`` (EC2 API reference)
in the deploying account and answers:

- ``AvailabilityZone``: the preferred AZ (``PreferredAz``, from ``-c <id>_az``) when it offers
  every type, else, on an update, the AZ chosen before when it still does (no needless
  replacement), else the first AZ by name that offers every type (all of ``InstanceTypes``; an
  image build host list such as c7g.8xlarge,c7g.16xlarge must be launchable in one subnet);
- ``CidrBlock``: ``<CidrPrefix>.<CidrBase + index of the AZ letter>.0/24``, so a move to another
  AZ gets another block and CloudFormation can create the new subnet before deleting the old one;
- ``Offered``: the AZs that offer every type, comma-separated, for the stack outputs.

A type no AZ offers fails the resource with one line naming the type, the region and what to do.
Only ``ec2:DescribeInstanceTypeOfferings`` and ``ec2:DescribeAvailabilityZones`` are called:
both support no resource-level permissions (Service Authorization Reference, Amazon EC2), which
is why the role grants them on "*". Delete does nothing (nothing was created).

Self-contained but for ../cfn_response.py, packed beside it (stacks/lambda_code.py): boto3 and
the standard library, the Lambda Python runtime's. Tests and preflight import it.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from ..cfn_response import respond

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


def decide(event: Mapping[str, Any], ec2: Any, region: str) -> tuple[str, dict[str, str]]:
    """(physical id, data) for a Create or Update event. Raises ChoiceError."""
    props = event["ResourceProperties"]
    types = [t for t in props["InstanceTypes"] if t]
    if not types:
        raise ChoiceError("InstanceTypes is empty")
    previous = event.get("PhysicalResourceId", "") if event["RequestType"] == "Update" else ""
    az, fit = choose(region, available_zones(ec2), offerings(ec2, types), props.get("PreferredAz", ""), previous)
    return az, {"AvailabilityZone": az, "Offered": ",".join(fit),
                "CidrBlock": cidr_block(props["CidrPrefix"], int(props["CidrBase"]), az)}


def handler(event: Mapping[str, Any], context: Any, ec2: Any = None, send=respond) -> None:
    physical = event.get("PhysicalResourceId") or "pending"
    if event["RequestType"] == "Delete":
        return send(event, "SUCCESS", physical, {})
    try:
        import boto3

        ec2 = ec2 or boto3.client("ec2")
        physical, data = decide(event, ec2, ec2.meta.region_name)
    except ChoiceError as e:
        return send(event, "FAILED", physical, {}, str(e))
    except Exception as e:  # noqa: BLE001 - any other error still answers CloudFormation, with its reason
        return send(event, "FAILED", physical, {}, f"{type(e).__name__}: {e}")
    print(json.dumps({"chosen": data}))
    return send(event, "SUCCESS", physical, data)
