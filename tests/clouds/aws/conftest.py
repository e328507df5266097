"""AWS fixtures: moto's server, the test VPC in the netns lab, bodies (tests/aws_moto.py)."""

from tests.aws_moto import aws_cloud, aws_moto, moto_server

__all__ = ["aws_cloud", "aws_moto", "moto_server"]
