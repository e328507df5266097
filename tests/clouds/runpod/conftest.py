"""RunPod fixtures (tests/runpod_fake.py)."""

from tests.runpod_fake import runpod_cloud, runpod_fake

__all__ = ["runpod_cloud", "runpod_fake"]
