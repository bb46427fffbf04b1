"""The kit's shared core: what the CDK app (stacks/) and the harness (harness/) both need.

The backend catalog, regions, variants, AWS name lists, package schemes, the typed cdk.json
config, image facts and the DLC table. Plain Python: it imports neither stacks nor harness, nor
aws-cdk-lib nor boto3 (botocore only for its bundled data files), so either side can depend on it
and neither on the other (tests/test_import_graph.py enforces the direction). This file imports
nothing: the AZ-choice Lambda ships kit/__init__.py and kit/az_choice.py in its asset.
"""
