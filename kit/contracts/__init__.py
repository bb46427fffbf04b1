"""The hand-offs between the kit's parts, each defined once and used by both of its sides.

- ``outputs``: the CloudFormation output keys every backend stack emits (written by
  stacks/outputs.py, read by harness/discovery.py).
- ``boot_env``: the ``KIT_*`` variables the EC2 boot scripts (userdata/*.sh) read, which the
  stack writes to /etc/inference-kit/kit.env (stacks/ec2_backend.py, stacks/inference_instance.py).
- ``results``: every file the harness writes into a results directory, with its
  ``schema_version`` and its typed shape (written by the harness's stages, read by harness.cost,
  harness.report and the ``--resume`` paths); ``shape`` is the small checker those shapes use.

Plain Python, standard library only: the bench's instance zip (harness/bench/remote.py) carries
the modules it imports, and the instance's Python has nothing of the kit installed (aiohttp is
all the bench requires there), so the shapes are ``TypedDict`` classes held to by a small
checker (``shape``) rather than pydantic models, although pydantic is installed here (2.14.4,
constraints.txt, through strands-agents). tests/kit/test_contract_results.py imports them with
no site-packages.
"""
