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
        raise PackageError(start_refused(e, region)) from None
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


def start_refused(e: Exception, region: str | None) -> str:
    """One line for a refused StartBuild: what the error means and the command that fixes it."""
    from harness.account.preflight_fresh import quota_fix
    from kit.codebuild import QUEUE_FACTOR, package_build_quota, queue_limit

    err = getattr(e, "response", {}).get("Error", {})
    code, message = err.get("Code") or type(e).__name__, err.get("Message") or str(e)
    where = f" in {region}" if region else ""
    said = f"({code}: {message})"
    if code == "ResourceNotFoundException":
        return (f"cannot start {PROJECT_NAME}{where}: the project does not exist there {said}; deploy it first: "
                "npx cdk deploy PackageStack -c g6_model=package (another region: --region)")
    limit = queue_limit(message) if code == "AccountLimitExceededException" else None
    if limit is None:
        return f"cannot start {PROJECT_NAME}{where} {said}"
    quota, name = package_build_quota()
    fix = quota_fix("codebuild", quota, 1, region or "<region>")
    if limit == 0:
        return (f"cannot start {PROJECT_NAME}{where}: CodeBuild lets this account queue no build of this project's "
                f"compute type there {said}, i.e. its '{name}' limit is 0 (the queue holds {QUEUE_FACTOR}x that "
                f"limit; new accounts start there); fix: {fix} (if Service Quotas already shows 1 or more, ask "
                "AWS Support to apply it to the account)")
    return (f"cannot start {PROJECT_NAME}{where}: CodeBuild's queue for this account is full, {limit} builds of "
            f"this compute type already running or queued {said}; wait for them (aws codebuild list-builds "
            f"--region {region or '<region>'}) or raise '{name}' ({quota})")


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
