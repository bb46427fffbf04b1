"""CDK stacks of the inference kit. Imports aws-cdk-lib; the harness never imports this package."""
