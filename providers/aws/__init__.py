"""aws provider: each proxy is an EC2 instance with its own security group.

Built on boto3 (the `aws` extra). See docs/aws-provider.md.
"""
