"""Values that synthesized into a traceback or into a template that cannot work: a SageMaker type
named twice in the GPU-family sweep (a jsii duplicate-construct error), a hard time limit shorter
than the deploy's own wait for its backend (ttl_hours=0.0001 is 0.36 s; 1e-320). Each is one
`config error:` line naming the value and what is valid, exit 2, from kit.config.parse, which
app.py, preflight and harness.account.deploy share."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kit.config import MIN_TTL_HOURS, ConfigError, parse
from tests.stacks.conftest import ROOT

TWICE = [
    ("ml.g6.xlarge,ml.g6.xlarge", "ml.g6.xlarge"),
    ("ml.g6.xlarge, ml.g6.xlarge", "ml.g6.xlarge"),
    ("ml.g5.xlarge,ml.g6.xlarge,ml.g5.xlarge", "ml.g5.xlarge"),
    (["ml.g6.xlarge", "ml.g6.xlarge"], "ml.g6.xlarge"),
]


@pytest.mark.parametrize("value, twice", TWICE)
def test_a_sweep_type_named_twice_is_one_line(value, twice):
    with pytest.raises(ConfigError) as e:
        parse({"backends": "sagemaker", "sagemaker_instance_types": value})
    msg = str(e.value)
    assert msg.startswith(f"sagemaker_instance_types={value!r} names {twice} twice") and "\n" not in msg


def test_a_sweep_of_distinct_types_still_parses():
    c = parse({"backends": "sagemaker", "sagemaker_instance_types": "ml.g5.xlarge,ml.g6.xlarge"})
    assert c.backends[0].instance_types == ("ml.g5.xlarge", "ml.g6.xlarge")


SHORT_TTL = ["0.0001", "0.01", "1e-320", 1e-320, "0.5", 0.99, "5e-324", "0.9999999"]


@pytest.mark.parametrize("value", SHORT_TTL)
def test_a_ttl_under_the_minimum_is_one_line(value):
    with pytest.raises(ConfigError) as e:
        parse({"backends": "g6", "ttl_hours": value})
    msg = str(e.value)
    assert msg.startswith(f"ttl_hours={value!r} is under the 1 hour minimum") and "valid: 1 to 720, or 0" in msg


@pytest.mark.parametrize("value, hours", [("0", 0.0), (0, 0.0), ("1", 1.0), (MIN_TTL_HOURS, 1.0), ("2.5", 2.5),
                                          ("720", 720.0)])
def test_zero_and_an_hour_or_more_are_kept(value, hours):
    assert parse({"backends": "g6", "ttl_hours": value}).ttl_hours == hours


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.5", "721"])
def test_no_number_and_out_of_range_are_refused_too(value):
    with pytest.raises(ConfigError, match=f"ttl_hours={value!r}"):
        parse({"backends": "g6", "ttl_hours": value})


@pytest.mark.parametrize("context, needle", [
    ({"backends": "sagemaker", "sagemaker_instance_types": "ml.g6.xlarge,ml.g6.xlarge"},
     "config error: sagemaker_instance_types='ml.g6.xlarge,ml.g6.xlarge' names ml.g6.xlarge twice"),
    ({"backends": "g6", "ttl_hours": "0.0001"}, "config error: ttl_hours='0.0001' is under the 1 hour minimum"),
    ({"backends": "g6", "ttl_hours": "1e-320"}, "config error: ttl_hours='1e-320' is under the 1 hour minimum"),
])
def test_the_app_refuses_in_one_line_exit_2(tmp_path, context, needle):
    """As `cdk synth -c ...` runs the app (context in CDK_CONTEXT_JSON): no jsii traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update(CDK_CONTEXT_JSON=json.dumps(context), CDK_OUTDIR=str(tmp_path / "out"),
               JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20")
    r = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stderr.splitlines() if line.startswith("config error:")]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(needle), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "jsii" not in r.stderr
