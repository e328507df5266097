"""GCP fixtures: the Compute REST fake, the product pointed at it, bodies (tests/gcp_fixtures.py)."""

from tests.gcp_fixtures import gcp_cloud, gcp_env, gcp_server

__all__ = ["gcp_cloud", "gcp_env", "gcp_server"]
