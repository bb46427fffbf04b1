"""Discovery: the deployed backends, as ``Endpoint`` objects, from the stacks' own outputs.

Sources, combined in this order:

* CloudFormation in each configured region (kit/regions.py: the kit's region and any
  ``<id>_region``; ``describe_stacks`` on the kit's stack names from
  ``kit.catalog``; a stack that does not exist is simply not deployed);
* or an outputs file (``cdk deploy --outputs-file cdk-outputs.json``: ``{StackName: {Key: value}}``);
* plus any OpenAI-compatible server given as ``--endpoint NAME=URL`` (model id from
  ``GET /v1/models`` unless given).

Variant stacks (kit/variants.py: ``<StackName>-<variant>``, e.g. ``G6Stack-bf16``, with a
``Variant`` output) are found by listing the region's stacks (``list_stacks``) or in the outputs
file, and become endpoints named ``<id>@<variant>`` (``g6@bf16``). ``backends`` filters accept a
backend id (the backend and its variants) or one ``<id>@<variant>``.

Every backend stack emits the same outputs: the contract with ``stacks/`` is
kit/contracts/outputs.py (``BackendId``, ``Service`` (bedrock|sagemaker|ec2), ``Region``,
``ModelId``, ``InstanceType``, and per service ``InstanceId`` + ``Port`` + ``SshUser`` (EC2),
``EndpointName`` (SageMaker), or just ``ModelId`` (Bedrock)).
"""
from __future__ import annotations

import json
import re
import stat
import time
import urllib.error
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from kit import catalog, variants
from kit.contracts import outputs as outputs_contract
from harness.endpoint import Endpoint, redact, split_credentials
from harness.http_deadline import fetch
from kit.errors import KitError

READY_STATUSES = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


class DiscoveryError(KitError, ValueError):
    """Bad discovery input (outputs file, --endpoint value); the message is one line."""


@dataclass
class Discovery:
    endpoints: list[Endpoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # stacks not deployed / not ready, skipped


def resolve_region(arg: str | None, env: Mapping[str, str] | None = None,
                   cdk_json: Path = Path("cdk.json")) -> str | None:
    """The kit's region (kit/regions.py: --region, else cdk.json context ``region``, else the
    default); the shell's AWS_REGION / AWS_DEFAULT_REGION are not used (``env`` is ignored, kept
    for callers). None when the value is malformed."""
    from kit.regions import RegionError, resolve

    try:
        return resolve(arg, cdk_json=cdk_json).region
    except RegionError:
        return None


def _stack_backend(stack_name: str, outputs: Mapping[str, str]) -> catalog.Backend | None:
    bid = outputs.get("BackendId")
    if bid in catalog.BACKENDS:
        return catalog.BACKENDS[bid]
    for b in catalog.BACKENDS.values():
        if b.stack_name == stack_name:
            return b
    return None


# What each service's stack adds to the common outputs (kit/contracts/outputs.py): Endpoint
# field <- output key, for the keys a stack without them is refused for (SshUser is optional).
SERVICE_OUTPUTS: dict[str, dict[str, str]] = {
    s: {f: k.name for f, k in outputs_contract.endpoint_fields(s).items() if k.required}
    for s in outputs_contract.SERVICES}
# A managed service's InstanceType output (kit/contracts/outputs.py: "never invented").
NO_INSTANCE = "managed"


def endpoint_from_outputs(stack_name: str, outputs: Mapping[str, str],
                          default_region: str | None = None) -> Endpoint:
    """One backend stack's outputs -> an Endpoint. Raises DiscoveryError naming a missing key.

    The protocol is the catalog backend's; the service (what bills) is the stack's own output."""
    b = _stack_backend(stack_name, outputs)
    if b is None:
        raise DiscoveryError(f"stack {stack_name!r} is not a kit backend (no BackendId output); "
                             f"valid backends: {', '.join(catalog.BACKEND_IDS)}")
    service = outputs.get("Service", b.service)
    if service not in SERVICE_OUTPUTS:
        raise DiscoveryError(f"stack {stack_name}: Service output {service!r} is not one of "
                             f"{', '.join(sorted(SERVICE_OUTPUTS))}")
    instance_type = outputs.get("InstanceType") or b.instance_type
    fields: dict[str, Any] = {}
    for name, key in SERVICE_OUTPUTS[service].items():
        v = outputs.get(key)
        if not v:
            raise DiscoveryError(f"stack {stack_name}: output {key!r} missing (service {service})")
        fields[name] = str(v)
    if "port" in fields:
        try:
            fields["port"] = int(fields["port"])
        except ValueError:
            raise DiscoveryError(f"stack {stack_name}: output 'Port' is not a number: {outputs['Port']!r}") from None
    model_id = outputs.get("ModelId") or b.model_id
    variant = outputs.get("Variant") or None
    if variant is not None and not variants.NAME.match(variant):
        raise DiscoveryError(f"stack {stack_name}: output 'Variant' {variant!r} is not a variant name")
    scheme = outputs.get("Scheme")
    scheme = variants.scheme_of(model_id) if not scheme or scheme == variants.UNKNOWN_SCHEME else scheme
    return Endpoint(name=variants.endpoint_name(b.id, variant), protocol=b.protocol, service=service,
                    model_id=model_id, label=b.label + _variant_words(variant, instance_type, b),
                    region=outputs.get("Region") or default_region, tool_calls=b.tool_calls,
                    instance_type=None if instance_type == NO_INSTANCE else instance_type,
                    stack_name=stack_name, ssh_user=outputs.get("SshUser") or None,
                    variant=variant, scheme=scheme, model_revision=outputs.get("ModelRevision") or None, **fields)


def _variant_words(variant: str | None, instance_type: str | None, b: catalog.Backend) -> str:
    """A variant's words in a label; one on another instance type says which (``vLLM on EC2 g6
    (L4), variant g5 on g5.xlarge``: the backend's label names its default hardware)."""
    if variant is None:
        return ""
    return f", variant {variant}" + (f" on {instance_type}" if instance_type and instance_type != b.instance_type
                                     and instance_type != NO_INSTANCE else "")


def ttl_note(backend_id: str, outputs: Mapping[str, str], now: float | None = None) -> str | None:
    """A warning when the stack's hard time limit (output ``TtlExpiresAt``, ISO UTC) has passed or
    is less than an hour away: the guardrails stop or delete the backend then, mid-run."""
    raw = outputs.get("TtlExpiresAt")
    if not raw or raw == "disabled":
        return None
    try:
        at = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    left = at - (time.time() if now is None else now)
    if left <= 0:
        return f"{backend_id}: its time limit passed at {raw}; the guardrails may have stopped it"
    if left < 3600:
        return f"{backend_id}: its time limit ends at {raw} (in {int(left // 60)} min); a long run may be cut off"
    return None


def endpoints_from_outputs(stack_name: str, outputs: Mapping[str, str],
                           default_region: str | None = None) -> list[Endpoint]:
    """One backend stack's outputs -> its endpoints: one, or for a SageMaker stack deployed on
    several instance types (the GPU-family sweep, ``sagemaker_instance_types``) one per type,
    named ``sagemaker@<family>-<size>`` (``sagemaker@g6e-xlarge``) from its ``EndpointNames``
    output (``type=name,...``), each with its own instance type."""
    ep = endpoint_from_outputs(stack_name, outputs, default_region)
    pairs = [p.partition("=") for p in (outputs.get("EndpointNames") or "").split(",") if "=" in p]
    if ep.service != "sagemaker" or ep.variant is not None or len(pairs) < 2:
        return [ep]
    out = []
    for itype, _, name in pairs:
        word = itype.removeprefix("ml.").replace(".", "-")
        if not variants.NAME.match(word) or not name:
            raise DiscoveryError(f"stack {stack_name}: EndpointNames entry {itype}={name!r} is not a type=name pair")
        out.append(replace(ep, name=variants.endpoint_name(ep.name, word), endpoint_name=name, instance_type=itype,
                           label=f"{ep.label}, {itype}"))
    return out


def from_outputs(all_outputs: Mapping[str, Mapping[str, str]], default_region: str | None = None,
                 backends: Iterable[str] | None = None) -> Discovery:
    """``{StackName: {OutputKey: value}}`` -> endpoints for the kit's backend stacks in it.

    Stacks that are not backends (the NetworkStack, image stacks) are ignored.
    """
    wanted = set(backends) if backends else None
    d = Discovery()
    for b in catalog.BACKENDS.values():
        if wanted is not None and b.id not in wanted:
            continue
        outputs = all_outputs.get(b.stack_name)
        if outputs is None:
            d.notes.append(f"{b.id}: {b.stack_name} not deployed")
            continue
        d.endpoints.extend(endpoints_from_outputs(b.stack_name, outputs, default_region))
        d.notes += [n for n in [ttl_note(b.id, outputs)] if n]
    for stack_name, _bid, variant in variant_stacks(all_outputs, wanted):
        outputs = all_outputs[stack_name]
        ep = endpoint_from_outputs(stack_name, outputs, default_region)
        d.endpoints.append(ep)
        d.notes += [n for n in [ttl_note(ep.name, outputs)] if n]
    return d


def _selected(backend_id: str, variant: str, wanted: set[str] | None) -> bool:
    return wanted is None or backend_id in wanted or variants.endpoint_name(backend_id, variant) in wanted


def variant_stacks(stack_names: Iterable[str], wanted: set[str] | None = None) -> list[tuple[str, str, str]]:
    """(stack name, backend id, variant) of every variant stack among ``stack_names`` that
    ``wanted`` selects, in catalog order then by variant name."""
    found = [(name, *v) for name in stack_names if (v := variants.from_stack_name(name))]
    order = {b: i for i, b in enumerate(catalog.BACKEND_IDS)}
    return sorted(((n, b, v) for n, b, v in found if _selected(b, v, wanted)),
                  key=lambda t: (order[t[1]], t[2]))


# list_stacks returns deleted stacks too (for 90 days) unless filtered by status (AWS
# CloudFormation API reference, ListStacks, StackStatusFilter): every status but DELETE_COMPLETE.
LISTED_STATUSES = [
    "CREATE_IN_PROGRESS", "CREATE_FAILED", "CREATE_COMPLETE", "ROLLBACK_IN_PROGRESS", "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE", "DELETE_IN_PROGRESS", "DELETE_FAILED", "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_COMPLETE", "UPDATE_FAILED", "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_FAILED", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE",
    "REVIEW_IN_PROGRESS", "IMPORT_IN_PROGRESS", "IMPORT_COMPLETE", "IMPORT_ROLLBACK_IN_PROGRESS",
    "IMPORT_ROLLBACK_FAILED", "IMPORT_ROLLBACK_COMPLETE"]


def listed_stack_names(cfn: Any) -> list[str]:
    """Every stack name in the client's region that is not deleted (``list_stacks``, all pages)."""
    names: list[str] = []
    kwargs: dict[str, Any] = {"StackStatusFilter": LISTED_STATUSES}
    while True:
        page = cfn.list_stacks(**kwargs)
        names += [s["StackName"] for s in page.get("StackSummaries", [])]
        if not page.get("NextToken"):
            return names
        kwargs["NextToken"] = page["NextToken"]


OUTPUTS_FILE_CAP = 16 * 1024 * 1024  # bytes; cdk's outputs file for the kit's stacks is a few KB


def load_outputs_file(path: Path) -> dict[str, dict[str, str]]:
    """The ``cdk deploy --outputs-file`` JSON, checked: a regular file (not a directory, FIFO or
    device), at most OUTPUTS_FILE_CAP bytes, ``{StackName: {OutputKey: value}}``."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        raise DiscoveryError(f"--outputs-file {path}: {e.strerror}; give the file cdk deploy "
                             "--outputs-file wrote") from None
    if not stat.S_ISREG(st.st_mode):
        raise DiscoveryError(f"--outputs-file {path}: not a regular file; give the file cdk deploy "
                             "--outputs-file wrote")
    if st.st_size > OUTPUTS_FILE_CAP:
        raise DiscoveryError(f"--outputs-file {path}: {st.st_size} bytes, over the "
                             f"{OUTPUTS_FILE_CAP} a cdk outputs file can be")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise DiscoveryError(f"--outputs-file {path}: {e.strerror}") from None
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise DiscoveryError(f"--outputs-file {path}: not JSON ({str(e)[:200]})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise DiscoveryError(f"--outputs-file {path}: expected {{StackName: {{OutputKey: value}}}} "
                             "as written by cdk deploy --outputs-file")
    return data


def from_cloudformation(cfn: Any, default_region: str | None = None,
                        backends: Iterable[str] | None = None) -> Discovery:
    """Read the kit's backend stacks with ``describe_stacks``; missing = not deployed."""
    from botocore.exceptions import ClientError

    d = Discovery()
    wanted = set(backends) if backends else None

    def read(backend_id: str, name: str, stack_name: str) -> None:
        try:
            stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
        except ClientError as e:
            if "does not exist" in str(e):
                d.notes.append(f"{name}: {stack_name} not deployed")
                return
            raise
        status = stack.get("StackStatus", "")
        if status not in READY_STATUSES:
            hint = capacity_hint(backend_id, _failure_events(cfn, stack_name)) if "ROLLBACK" in status or \
                status.endswith("FAILED") else None
            d.notes.append(f"{name}: {stack_name} is {status}, skipped" + (f": {hint}" if hint else ""))
            return
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        d.endpoints.extend(endpoints_from_outputs(stack_name, outputs, default_region))
        d.notes += [n for n in [ttl_note(name, outputs)] if n]

    for b in catalog.BACKENDS.values():
        if wanted is None or b.id in wanted:
            read(b.id, b.id, b.stack_name)
    for stack_name, bid, variant in variant_stacks(listed_stack_names(cfn), wanted):
        read(bid, variants.endpoint_name(bid, variant), stack_name)
    return d


_AZ = r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d[a-z]"


def capacity_hint(backend_id: str, events: Iterable[Mapping[str, Any]]) -> str | None:
    """One line saying what to do when EC2 had no capacity for the instance in its AZ
    (``InsufficientInstanceCapacity``; the CREATE_FAILED event's reason carries EC2's message,
    which names the AZ asked for in parentheses and, when it has them, the AZs to choose
    instead). Capacity is per AZ and changes by the minute: the user redeploys with
    ``-c <id>_az=`` one of those (stacks/az_choice.py honours it when the AZ offers the type)."""
    for e in events:
        reason = str(e.get("ResourceStatusReason") or "")
        if "InsufficientInstanceCapacity" not in reason and not re.search(r"sufficient .*capacity", reason):
            continue
        asked = re.search(r"\((" + _AZ + r")\)", reason)
        itype = re.search(r"sufficient ([a-z0-9]+\.[a-z0-9]+) capacity", reason)
        instead = [z for z in re.findall(_AZ, reason.split("choosing", 1)[1])] if "choosing" in reason else []
        what = f"no {itype.group(1)} capacity" if itype else "no capacity"
        where = f" in {asked.group(1)}" if asked else ""
        if instead:
            return (f"EC2 had {what}{where}; deploy again with -c {backend_id}_az={instead[0]} "
                    f"(EC2 suggests {', '.join(instead)})")
        return (f"EC2 had {what}{where}; deploy again later, or with -c {backend_id}_az=<another AZ that "
                f"offers it> (python -m harness preflight lists them)")
    return None


def _failure_events(cfn: Any, stack_name: str) -> list[Mapping[str, Any]]:
    """The stack's latest events that failed (first page, newest first); [] when unreadable."""
    try:
        events = cfn.describe_stack_events(StackName=stack_name).get("StackEvents", [])
    except Exception:  # noqa: BLE001 - a hint is optional; the note still says the status
        return []
    return [e for e in events if str(e.get("ResourceStatus", "")).endswith("FAILED")]


def from_regions(client_for: Any, kit: Any, backends: Iterable[str] | None = None) -> Discovery:
    """``from_cloudformation`` in every region the configuration uses (kit/regions.py
    ``KitRegions``), each backend looked for in its own region. ``client_for(region)`` returns a
    CloudFormation client there."""
    wanted = tuple(backends) if backends else catalog.BACKEND_IDS
    d = Discovery()
    for region in kit.regions:  # a variant lives where its backend does
        here = tuple(w for w in wanted if kit.of(variants.split(w)[0]) == region)
        if not here:
            continue
        part = from_cloudformation(client_for(region), region, here)
        d.endpoints += part.endpoints
        d.notes += [n.replace(" not deployed", f" not deployed in {region}") for n in part.notes]
    return d


# --------------------------------------------------------------------------- --endpoint NAME=URL
def parse_endpoint_arg(value: str) -> tuple[str, str]:
    """``NAME=URL`` -> (name, base URL ending in /v1, without credentials). Raises
    DiscoveryError with one line (credentials in it shown as ***)."""
    name, url, _ = parse_endpoint(value)
    return name, url


def parse_endpoint(value: str) -> tuple[str, str, str | None]:
    """``NAME=URL`` -> (name, base URL ending in /v1, the Authorization header for credentials
    in the URL or None). ``http://user:TOKEN@host/v1`` is sent to host with HTTP Basic
    authentication; the credentials never appear in a message or a saved file."""
    name, sep, url = value.partition("=")
    if not sep or not _NAME.match(name) or not re.match(r"^https?://[^/\s]+", url):
        raise DiscoveryError(f"--endpoint {redact(value)!r}: expected NAME=URL, e.g. "
                             "local=http://127.0.0.1:8000/v1 (NAME: letters, digits, . _ -)")
    url, auth = split_credentials(url)
    if not re.match(r"^https?://[^/\s:@]+", url):  # e.g. http://user:TOKEN@/v1: no host
        raise DiscoveryError(f"--endpoint {redact(value)!r}: the URL names no host")
    url = url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    return name, url, auth


def probe_model_id(base_url: str, timeout: float = 10.0, auth: str | None = None) -> str:
    """The first model an OpenAI-compatible server lists at ``GET /v1/models``, asked within a
    total deadline of ``timeout`` seconds (harness.http_deadline: a server that drips its reply
    cannot hold discovery)."""
    try:
        status, raw = fetch(base_url + "/models", deadline_s=timeout, cap=4 * 1024 * 1024,
                            headers={"Authorization": auth} if auth else {})
        if status != 200:
            raise ValueError(f"HTTP {status}")
        data = json.loads(raw)
        return str(data["data"][0]["id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError, RecursionError) as e:
        reason = getattr(e, "reason", None) or e
        raise DiscoveryError(f"{base_url}/models: no model id ({reason}); pass --model") from None


def parse_model_args(values: Iterable[str]) -> tuple[str | None, dict[str, str]]:
    """``--model ID`` (for every --endpoint) and ``--model NAME=ID`` (for one)."""
    default, per = None, {}
    for v in values:
        name, sep, mid = v.partition("=")
        if sep and _NAME.match(name) and mid:
            per[name] = mid
        elif not sep and v:
            default = v
        else:
            raise DiscoveryError(f"--model {v!r}: expected MODEL_ID or NAME=MODEL_ID")
    return default, per


def check_endpoint_names(endpoints: Iterable[str], models: Iterable[str] = (),
                         plain: Iterable[str] = ()) -> None:
    """Every NAME that ``--model NAME=ID`` and ``--plain NAME`` give is an ``--endpoint`` NAME
    (a typo there would silently measure the wrong model or mode). Raises DiscoveryError."""
    names = [parse_endpoint_arg(v)[0] for v in endpoints]
    valid = ", ".join(names) if names else "none (no --endpoint given)"
    _, per_model = parse_model_args(models)
    for flag, given in (("--model", list(per_model)), ("--plain", list(plain))):
        for name in given:
            if name not in names:
                raise DiscoveryError(f"{flag} {name!r} names no --endpoint; valid names: {valid}")


def from_endpoint_args(values: Iterable[str], models: Iterable[str] = (),
                       plain: Iterable[str] = (), *,
                       unreachable: dict[str, str] | None = None) -> list[Endpoint]:
    """Endpoints for ``--endpoint NAME=URL``. A server whose model id must be probed and that does
    not answer raises DiscoveryError, unless ``unreachable`` is given: then it is recorded there
    (name -> reason) and returned with an empty model id, for the caller to report and skip."""
    default_model, per_model = parse_model_args(models)
    plain = set(plain)
    out: list[Endpoint] = []
    for v in values:
        name, url, auth = parse_endpoint(v)
        if any(e.name == name for e in out):
            raise DiscoveryError(f"--endpoint {redact(v)!r}: name {name!r} given twice")
        model_id = per_model.get(name) or default_model
        if not model_id:
            try:
                model_id = probe_model_id(url, auth=auth)
            except DiscoveryError as e:
                if unreachable is None:
                    raise
                unreachable[name] = str(e)
                model_id = ""
        out.append(Endpoint(name=name, protocol="openai", model_id=model_id, label=f"{name} ({url})",
                            base_url=url, tool_calls=name not in plain, auth=auth))
    return out
