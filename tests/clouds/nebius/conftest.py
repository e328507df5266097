"""Nebius fixtures: the in-process gRPC fake, IAM token, bodies (tests/nebius_fake.py)."""

from tests.nebius_fake import nebius_cloud, nebius_fake

__all__ = ["nebius_cloud", "nebius_fake"]
