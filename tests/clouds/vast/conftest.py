"""Vast fixtures: the local Vast API fake (tests/vast_fake.py)."""

from tests.vast_fake import vast_cloud, vast_fake

__all__ = ["vast_cloud", "vast_fake"]
