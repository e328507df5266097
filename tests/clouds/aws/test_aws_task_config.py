"""Issue 12: a task's `config: {aws: ...}` keys reach the EC2 provisioner and are laid
over config.yaml's `aws:` section for that launch only (moto, in-process)."""

from __future__ import annotations

from dataclasses import replace

from launcher.config.settings import AWSSettings
from tests.clouds.aws.aws_fixtures import (  # noqa: F401  (fixtures)
    aws_env,
    factory,
    make_cloud,
    request,
    waiter,
)


def test_task_config_overrides_config_yaml_for_one_launch(factory) -> None:  # noqa: F811
    seen: list[dict] = []
    factory.ec2("us-east-1").meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: seen.append(dict(params)))
    aws = make_cloud(factory, settings=AWSSettings())  # config.yaml: public IPs, ubuntu
    req = replace(request("tc", num_nodes=1),
                  settings={"aws": {"use_internal_ips": True, "ssh_user": "ec2-user"}})
    info = aws.provision(req)
    assert info.head.external_ip is None and info.head.ssh_user == "ec2-user"
    assert seen[0]["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is False
    plain = aws.provision(request("plain", num_nodes=1))  # the next launch: config.yaml again
    assert plain.head.ssh_user == "ubuntu"
    assert seen[1]["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is True
