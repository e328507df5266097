"""Lambda fixtures: the local Lambda API fake (tests/lambda_fake.py)."""

from tests.lambda_fake import lambda_cloud, lambda_fake

__all__ = ["lambda_cloud", "lambda_fake"]
