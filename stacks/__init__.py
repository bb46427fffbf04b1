"""CDK stacks of the inference kit. Every module here imports aws-cdk-lib except ``config``,
which is plain Python so the harness (preflight) can check exactly what ``cdk deploy`` would
create without the CDK installed.

Every backend fact (ids, stacks, services, image families, instance rules, engine settings,
default models) lives in kit/catalog.py; each module's docstring says which of them it reads,
and none compares against a backend id."""
