"""The `catalog:` section of config.yaml (where `launcher catalog refresh` reads prices)."""

from __future__ import annotations

import pytest

from launcher.config.settings import CatalogSource, parse_config
from launcher.errors import ConfigError


def test_catalog_section_is_typed() -> None:
    cfg = parse_config(
        "catalog:\n  aws:\n    regions: [us-east-1, us-west-2]\n"
        "    price_list_url: http://127.0.0.1:8000/offers/v1.0/aws/AmazonEC2/current\n"
        "    price_list_format: json\n"
    )
    assert cfg.catalog == {
        "aws": CatalogSource(
            regions=("us-east-1", "us-west-2"),
            price_list_url="http://127.0.0.1:8000/offers/v1.0/aws/AmazonEC2/current",
            price_list_format="json",
        )
    }
    assert parse_config("ssh_node_pools: {}\n").catalog == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("catalog: [aws]\n", "field 'catalog': expected a mapping"),
        ("catalog:\n  aws:\n    region: us-east-1\n", "field 'catalog.aws.region': unknown field"),
        ("catalog:\n  aws:\n    regions: []\n", "field 'catalog.aws.regions': expected a non-empty"),
        ("catalog:\n  aws:\n    price_list_url: ftp://x\n", "expected an http(s) URL"),
        ("catalog:\n  aws:\n    price_list_format: xml\n", "expected csv or json"),
    ],
)
def test_catalog_section_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="config.yaml")
    assert message in str(err.value)
