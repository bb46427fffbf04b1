"""AWS responses replayed through a real botocore client, so every response a test feeds the code
has the API's real shape: ``botocore.stub.Stubber`` validates each one against the service model
botocore ships (the source of the shape), and each request against its input shape.

    ssm = Replay("ssm", lambda op, params: {...})      # a response dict, or
    ssm = Replay("ssm", lambda op, params: Error("ParameterNotFound", "...", 400))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import boto3
from botocore.stub import Stubber


@dataclass
class Error:
    code: str
    message: str = ""
    status: int = 400


class Replay:
    def __init__(self, service: str, handler: Callable[[str, dict[str, Any]], Any], region: str = "us-east-1"):
        self.client = boto3.client(service, region_name=region, aws_access_key_id="testing",
                                   aws_secret_access_key="testing")
        self.stubber = Stubber(self.client)
        self.stubber.activate()
        self.handler = handler
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get_paginator(self, name: str) -> Any:
        """One page per paginate() call, replayed like a call."""
        real, replay = self.client.get_paginator(name), self

        class Pages:
            def paginate(self, **params: Any) -> Any:
                replay.calls.append((name, params))
                replay.stubber.add_response(name, replay.handler(name, params), expected_params=params)
                return real.paginate(**params)

        return Pages()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in ("meta", "exceptions"):  # the client's own (region, error classes), not calls
            return getattr(self.client, name)
        method = getattr(self.client, name)
        op = self.client.meta.method_to_api_mapping.get(name)
        if op is None:  # get_paginator and the like: not replayed
            raise AttributeError(name)

        def call(**params: Any) -> Any:
            self.calls.append((name, params))
            out = self.handler(name, params)
            if isinstance(out, Error):
                self.stubber.add_client_error(name, service_error_code=out.code, service_message=out.message,
                                              http_status_code=out.status, expected_params=params)
            else:
                self.stubber.add_response(name, out, expected_params=params)
            return method(**params)

        return call


def ssm_parameters(values: dict[str, str]) -> Replay:
    """GetParameters: names in ``values`` resolve, others come back in InvalidParameters (the API's
    answer for a name that does not exist)."""
    def handler(op: str, params: dict[str, Any]) -> Any:
        assert op == "get_parameters", op
        names = params["Names"]
        out: dict[str, Any] = {"Parameters": [
            {"Name": n, "Type": "String", "Value": values[n], "Version": 1,
             "DataType": "aws:ec2:image" if n.startswith("/imagebuilder/") else "text"}
            for n in names if n in values]}
        missing = [n for n in names if n not in values]
        if missing:  # the model says min length 1: the API leaves the key out when none is missing
            out["InvalidParameters"] = missing
        return out
    return Replay("ssm", handler)


def ecr_images(tags: set[str] | None, registry: str | None = None) -> Replay:
    """BatchGetImage on the DLC registry: ``tags`` exist (None: no such repository)."""
    def handler(op: str, params: dict[str, Any]) -> Any:
        assert op == "batch_get_image", op
        if registry is not None:
            assert params["registryId"] == registry, params
        if tags is None:
            return Error("RepositoryNotFoundException",
                         f"The repository with name '{params['repositoryName']}' does not exist in the registry "
                         f"with id '{params['registryId']}'")
        asked = [i["imageTag"] for i in params["imageIds"]]
        return {"images": [{"registryId": params["registryId"], "repositoryName": params["repositoryName"],
                            "imageId": {"imageTag": tag, "imageDigest": "sha256:" + "0" * 64},
                            "imageManifest": "{}", "imageManifestMediaType":
                            "application/vnd.docker.distribution.manifest.v2+json"} for tag in asked if tag in tags],
                "failures": [{"imageId": {"imageTag": tag}, "failureCode": "ImageNotFound",
                              "failureReason": "Requested image not found"} for tag in asked if tag not in tags]}
    return Replay("ecr", handler)


# A string shaped like a Hugging Face user access token (hf_ and 34 letters: harness/account/preflight_fresh.py
# HF_TOKEN_SHAPE); not a real token.
FAKE_HF_TOKEN = "hf_" + "FakeTokenForTestsOnlyAbCdEfGhIjKlM"


def secret_values(values: dict[str, str | None]) -> Replay:
    """GetSecretValue: a name in ``values`` holds that SecretString (None: SecretBinary only);
    others do not exist (the API's ResourceNotFoundException and message)."""
    from datetime import datetime, timezone

    def handler(op: str, params: dict[str, Any]) -> Any:
        assert op == "get_secret_value", op
        name = params["SecretId"]
        if name not in values:
            return Error("ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
        out: dict[str, Any] = {"ARN": f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf",
                               "Name": name, "VersionId": "01234567-89ab-cdef-0123-456789abcdef",
                               "VersionStages": ["AWSCURRENT"], "CreatedDate": datetime(2026, 11, 30, tzinfo=timezone.utc)}
        if values[name] is None:
            out["SecretBinary"] = b"\x00\x01"
        else:
            out["SecretString"] = values[name]
        return out
    return Replay("secretsmanager", handler)
