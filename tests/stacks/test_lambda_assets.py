"""Each Lambda asset imports on its own, as the Lambda Python runtime meets it: only the staged
folder on sys.path (the function's /var/task), no repo, no site-packages of ours. The AZ choice
asset carries kit/az_choice.py (the decision preflight makes too); a missing file here is an
ImportError at the first deploy, in CloudFormation's event log."""
from __future__ import annotations

import subprocess
import sys

import pytest

from stacks import lambda_code


@pytest.mark.parametrize("name", ["az_choice", "endpoint_ready"])
def test_the_staged_handler_imports_with_nothing_but_its_asset(name):
    stage = lambda_code._staged(name)
    module = lambda_code.handler_name(name).rpartition(".")[0]
    # -I: isolated (no user site, no PYTHONPATH, no cwd on the path); -S: no site-packages
    probe = f"import sys; sys.path.insert(0, {stage!r}); import {module} as m; print(m.handler.__module__)"
    # -B: no __pycache__ written into the staged folder, which later synths of this process hash as the asset
    out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", probe], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == module


def test_the_az_choice_asset_holds_only_what_it_needs():
    from pathlib import Path
    stage = Path(lambda_code._staged("az_choice"))
    files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*.py"))
    assert files == ["kit/__init__.py", "kit/az_choice.py", "lambdas/__init__.py", "lambdas/az_choice/__init__.py",
                     "lambdas/az_choice/index.py", "lambdas/cfn_response.py"]
