"""Start a package build in the account (PackageStack's CodeBuild project) and follow it.

``python -m harness.package start --scheme emb4`` = ``codebuild start-build`` with SCHEME (SOURCE,
REVISION) overridden, then the build's CloudWatch log lines as they arrive, the phase it failed in,
and the S3 URI it published (SSM ``/inference-kit/package/<scheme>``). Exit 0 only when the build
succeeded. The clients are injectable so tests drive it without AWS.

The clients are made in the kit's region (``--region``, else cdk.json's context ``region``:
kit/regions.py), where stacks/wiring.py puts PackageStack, never in the shell's
``AWS_REGION``/``AWS_DEFAULT_REGION``: boto3 reads those (or the profile) when no ``region_name``
is given, which finds no project, or no region at all, whenever the shell names another one.
"""
from __future__ import annotations

import time

from harness.package.source import PackageError
from kit.schemes import PARAMETER_PREFIX, PROJECT_NAME  # the names PackageStack gives them

DONE = {"SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED"}
# The log's last lines (a failure's reason among them) can reach CloudWatch after the build has
# ended, and GetLogEvents can answer empty while data is there: AWS's own follower
# (aws-actions/aws-codebuild-run-build, code.js waitForBuildEndTime) keeps reading after the end
# until two reads in a row bring nothing. Same here, DRAIN_S apart, at most DRAIN_READS reads.
EMPTY_READS_AT_END = 2
DRAIN_S = 3.0
DRAIN_READS = 20


def _overrides(scheme: str, source: str | None, revision: str | None) -> list[dict]:
    values = {"SCHEME": scheme, "SOURCE": source or "", "REVISION": revision or ""}
    return [{"name": k, "value": v, "type": "PLAINTEXT"} for k, v in values.items()]


def start(scheme: str, source: str | None = None, revision: str | None = None, *, region: str | None = None,
          codebuild=None, logs=None, ssm=None, log=print, poll_s: float = 10.0, sleep=time.sleep) -> int:
    codebuild, logs = codebuild or _client("codebuild", region), logs or _client("logs", region)
    try:
        build = codebuild.start_build(projectName=PROJECT_NAME,
                                      environmentVariablesOverride=_overrides(scheme, source, revision))["build"]
    except Exception as e:  # noqa: BLE001 - any CodeBuild failure is one PackageError line
        where = f" in {region}" if region else ""
        raise PackageError(f"cannot start {PROJECT_NAME}{where} ({type(e).__name__}: {e}); "
                           "deploy it first: npx cdk deploy PackageStack -c g6_model=package "
                           "(another region: --region)") from None
    build_id = build["id"]
    log(f"started {build_id} (scheme {scheme}); following its log")
    token = None
    while True:
        build = codebuild.batch_get_builds(ids=[build_id])["builds"][0]
        where = build.get("logs") or {}
        stream = (where["groupName"], where["streamName"]) if where.get("groupName") and where.get("streamName") else None
        if stream:
            token, _ = _print_new_lines(logs, *stream, token, log)
        status = build["buildStatus"]
        if status in DONE:
            break
        sleep(poll_s)
    empty = 0
    for _ in range(DRAIN_READS if stream else 0):
        if empty >= EMPTY_READS_AT_END:
            break
        sleep(DRAIN_S)
        token, printed = _print_new_lines(logs, *stream, token, log)
        empty = 0 if printed else empty + 1
    if status != "SUCCEEDED":
        failed = [p for p in build.get("phases", []) if p.get("phaseStatus") not in (None, "SUCCEEDED")]
        phase = failed[0]["phaseType"] if failed else "?"
        log(f"build {build_id} {status} in phase {phase}; the log lines above say why")
        return 1
    uri = (ssm or _client("ssm", region)).get_parameter(Name=f"{PARAMETER_PREFIX}/{scheme}")["Parameter"]["Value"]
    log(f"build {build_id} SUCCEEDED: {uri} (in {PARAMETER_PREFIX}/{scheme})")
    return 0


def _client(name: str, region: str | None):
    import boto3

    return boto3.client(name, region_name=region)


def _print_new_lines(logs, group: str, stream: str, token, log) -> tuple[str | None, int]:
    """Print the stream's lines after ``token``; the token to go on from, and how many were printed."""
    printed = 0
    while True:
        kwargs = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
        if token:
            kwargs["nextToken"] = token
        try:
            page = logs.get_log_events(**kwargs)
        except logs.exceptions.ResourceNotFoundException:
            return token, printed  # the stream appears a few seconds after the build starts
        for event in page.get("events", []):
            log(event["message"].rstrip("\n"))
            printed += 1
        if page.get("nextForwardToken") in (None, token):
            return page.get("nextForwardToken", token), printed
        token = page["nextForwardToken"]
