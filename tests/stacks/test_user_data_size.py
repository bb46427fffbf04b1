"""The user data fits EC2's 16 KB once CloudFormation has resolved it, not only as synthesized.

EC2 takes at most 16384 bytes of raw user data (EC2 User Guide, "Run commands when you launch an
EC2 instance with user data input": "limited to 16 KB, in raw form, before it is base64-encoded").
The template holds {"Ref": <wait-condition handle>}; CloudFormation puts the handle's presigned S3
URL there, several hundred bytes. A real one, as published in a public README
(rendicott's waitcondition-signal example, a us-east-2 stack in 2018), is RECORDED_URL; the test
gives each EC2 stack a URL of that shape with its own region, stack name and logical id.
"""
from __future__ import annotations

import subprocess

import pytest

from stacks.inference_instance import TOKEN_BUDGET, USER_DATA_LIMIT, USERDATA_DIR, strip_comments
from tests.stacks.conftest import EC2_STACKS

RECORDED_URL = (
    "https://cloudformation-waitcondition-us-east-2.s3.us-east-2.amazonaws.com/arn%3Aaws%3Acloudformation"
    "%3Aus-east-2%3A514723210267%3Astack/rpers-testing-254964c0-6694-11e8-901d-d0577bb471fb/"
    "256e51e0-6694-11e8-8bd0-50faf8bc7cae/ApplicationWaitHandle?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Date=20180602T183833Z&X-Amz-SignedHeaders=host&X-Amz-Expires=86399"
    "&X-Amz-Credential=AKIAI722P7Q4X76EQLQA%2F20180602%2Fus-east-2%2Fs3%2Faws4_request"
    "&X-Amz-Signature=1392d0c9ffc810f1b85451761cb60d2483519aec3d51898b1fd80f77796b8cd1")


def handle_url(region: str, stack: str, logical_id: str) -> str:
    return (RECORDED_URL.replace("us-east-2", region)
            .replace("rpers-testing-254964c0-6694-11e8-901d-d0577bb471fb", stack)
            .replace("ApplicationWaitHandle", logical_id))


def test_the_budget_covers_a_recorded_handle_url():
    assert len(RECORDED_URL) + 2 <= TOKEN_BUDGET  # +2: the single quotes around it in kit.env


@pytest.mark.parametrize("backend,stack", sorted(EC2_STACKS.items()))
def test_deployed_user_data_fits(kit, backend, stack):
    _, instance = kit.one(stack, "AWS::EC2::Instance")
    parts = instance["Properties"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    resolved = ""
    for p in parts:
        if isinstance(p, str):
            resolved += p
        elif "Ref" in p and kit.templates[stack]["Resources"][p["Ref"]]["Type"] == "AWS::CloudFormation::WaitConditionHandle":
            resolved += handle_url("us-east-1", stack, p["Ref"])
        else:  # another token (a package's S3 URI): its budget
            resolved += "x" * TOKEN_BUDGET
    assert len(resolved.encode()) <= USER_DATA_LIMIT, f"{stack}: {len(resolved.encode())} bytes"


def test_stripping_keeps_the_shebang_code_and_here_documents():
    script = "#!/bin/bash\n# a comment\nx=1  # kept\n  # indented comment\ncat <<UNIT\n# not a comment\nUNIT\n" \
             "cat <<'EOF'\n  # neither\nEOF\ncat <<-X\n\t# tabbed\n\tX\ny=$((x << 2))\n# gone\n"
    assert strip_comments(script) == ("#!/bin/bash\nx=1  # kept\ncat <<UNIT\n# not a comment\nUNIT\n"
                                      "cat <<'EOF'\n  # neither\nEOF\ncat <<-X\n\t# tabbed\n\tX\ny=$((x << 2))\n")


@pytest.mark.parametrize("name", sorted(p.name for p in USERDATA_DIR.glob("*.sh")))
def test_stripped_scripts_parse_and_keep_every_code_line(name):
    text = (USERDATA_DIR / name).read_text()
    stripped = strip_comments(text)
    r = subprocess.run(["bash", "-n"], input=stripped, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert [ln for ln in stripped.splitlines() if ln.strip() and not ln.lstrip().startswith("#")] == code
