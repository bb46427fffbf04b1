"""CDK stacks of the inference kit. Every module here imports aws-cdk-lib except ``config``,
which is plain Python so the harness (preflight) can check exactly what ``cdk deploy`` would
create without the CDK installed."""
