"""Azure fixtures: the local ARM fake, CLI-login credentials, bodies (tests/azure_fake.py)."""

from tests.azure_fake import azure_cloud, azure_fake

__all__ = ["azure_cloud", "azure_fake"]
