"""Lambda code for a handler under stacks/lambdas/: ``lambdas/<name>/index.py`` together with the
shared ``lambdas/cfn_response.py`` it imports (``from ..cfn_response import respond``), packed as
the package ``lambdas`` so the same relative import works in the function (handler
``lambdas.<name>.index.handler``) and in the repo (``stacks.lambdas.<name>.index``, as tests and
preflight import it). Only these files go in the asset, copied into a fresh folder at synth, plus
the core modules a handler imports (``kit/__init__.py`` and ``KIT_MODULES[name]``: the AZ choice is
decided by kit/az_choice.py, which preflight imports too), so ``import kit.<module>`` resolves from
the asset root in the function as it does in the repo.
"""
from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

from aws_cdk import aws_lambda as lambda_

LAMBDAS_DIR = Path(__file__).resolve().parent / "lambdas"
SHARED = ("__init__.py", "cfn_response.py")
KIT_DIR = Path(__file__).resolve().parent.parent / "kit"
KIT_MODULES = {"az_choice": ("az_choice.py",)}  # stdlib-only modules of the core a handler imports


def handler_name(name: str) -> str:
    return f"lambdas.{name}.index.handler"


def handler_code(name: str) -> lambda_.Code:
    return lambda_.Code.from_asset(_staged(name))


@functools.cache  # one folder per handler and synth, however many stacks use it
def _staged(name: str) -> str:
    stage = Path(tempfile.mkdtemp(prefix=f"kit-lambda-{name}-")) / "lambdas"
    (stage / name).mkdir(parents=True)
    for f in SHARED:
        shutil.copyfile(LAMBDAS_DIR / f, stage / f)
    for f in ("__init__.py", "index.py"):
        shutil.copyfile(LAMBDAS_DIR / name / f, stage / name / f)
    if name in KIT_MODULES:
        (stage.parent / "kit").mkdir()
        for f in ("__init__.py", *KIT_MODULES[name]):
            shutil.copyfile(KIT_DIR / f, stage.parent / "kit" / f)
    return str(stage.parent)
