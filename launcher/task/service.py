"""SkyPilot's `service:` section (SkyServe), validated and then set aside.

`launcher launch` runs the task itself, as `sky launch` does for a service YAML:
the replicas, readiness probe and load balancer are SkyServe's business
(`sky serve up`), which launcher does not have. So the section is checked the way
SkyServe documents it — a typo still gets an error naming the field — and the
launch carries a note saying it was ignored.

`check_service(value, origin) -> str` raises `TaskValidationError` for a bad section
and returns the note. Stdlib only (task loading is on the `launcher gpus` path).
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.task.fields import (
    Origin,
    Path,
    check_keys,
    describe,
    expect_int,
    expect_mapping,
    expect_positive_number,
    expect_str,
)

# SkyServe's fields (sky/utils/schemas.py get_service_schema), plus the ones SkyPilot's
# own examples use from its experimental serving branches: `https` (the older form of
# `tls`), `route53_hosted_zone` and `external_load_balancers` (examples/serve/external-lb),
# the SpotHedge policy fields of examples/serve/policy, and early SkyServe's `port` (now
# `resources.ports`) and `auth_key`. All are set aside with the section; only their shape
# is checked.
SERVICE_FIELDS = (
    "readiness_probe", "replica_policy", "replicas", "ports", "load_balancing_policy",
    "tls", "controller_resources", "pool", "workers", "spot_placer", "load_balancer",
    "https", "route53_hosted_zone", "external_load_balancers", "port", "auth_key",
)  # fmt: skip
PROBE_FIELDS = (
    "path", "post_data", "initial_delay_seconds", "timeout_seconds", "headers",
    "endpoint_probe_interval_seconds", "consecutive_failure_threshold_timeout",
)  # fmt: skip
REPLICA_POLICY_FIELDS = (
    "min_replicas", "max_replicas", "target_qps_per_replica", "autoscaling_decision_interval",
    "upscale_delay_seconds", "downscale_delay_seconds", "base_ondemand_fallback_replicas",
    "dynamic_ondemand_fallback", "num_overprovision", "spot_placer",
    "init_replicas", "spot_policy", "min_on_demand_replicas",
)  # fmt: skip
_COUNT_FIELDS = (
    "min_replicas", "max_replicas", "autoscaling_decision_interval", "upscale_delay_seconds",
    "downscale_delay_seconds", "base_ondemand_fallback_replicas", "num_overprovision",
    "init_replicas", "min_on_demand_replicas",
)  # fmt: skip
_PAIR_FIELDS = {"https": ("key", "cert"), "tls": ("keyfile", "certfile")}

IGNORED_NOTE = (
    "The 'service' section is ignored by launch: it runs the task once, as `sky launch` "
    "does; replicas, the readiness probe and load balancing need a serving controller "
    "(SkyServe's `sky serve up`), which launcher does not have."
)


def check_service(value: object, origin: Origin) -> str:
    """Validate `service:`; return the note that it is ignored. Raises TaskValidationError."""
    path: Path = ("service",)
    if value is None:
        return IGNORED_NOTE
    section = expect_mapping(value, path, origin, "a mapping (readiness_probe, replicas, ...)")
    check_keys(section, path, origin, SERVICE_FIELDS)
    probe = section.get("readiness_probe")
    if probe is not None:
        _check_probe(probe, path + ("readiness_probe",), origin)
    if section.get("replicas") is not None:
        if section.get("replica_policy") is not None:
            raise origin.error(
                path + ("replicas",), "give either 'replicas' or 'replica_policy', not both."
            )
        expect_int(section["replicas"], path + ("replicas",), origin, minimum=0)
    policy = section.get("replica_policy")
    if policy is not None:
        _check_policy(policy, path + ("replica_policy",), origin)
    for key in ("ports", "port"):
        if section.get(key) is not None:
            expect_int(section[key], path + (key,), origin, minimum=1, maximum=65535)
    if section.get("auth_key") is not None:
        expect_str(section["auth_key"], path + ("auth_key",), origin)
    if section.get("load_balancing_policy") is not None:
        expect_str(section["load_balancing_policy"], path + ("load_balancing_policy",), origin)
    for key, fields in _PAIR_FIELDS.items():
        if section.get(key) is not None:
            pair = expect_mapping(section[key], path + (key,), origin, f"a mapping {{{', '.join(fields)}}}")
            check_keys(pair, path + (key,), origin, fields)
    if section.get("route53_hosted_zone") is not None:
        expect_str(section["route53_hosted_zone"], path + ("route53_hosted_zone",), origin)
    balancers = section.get("external_load_balancers")
    if balancers is not None and not (
        isinstance(balancers, list) and all(isinstance(b, Mapping) for b in balancers)
    ):
        raise origin.error(
            path + ("external_load_balancers",),
            f"expected a list of mappings ({{resources, load_balancing_policy}}), "
            f"got {describe(balancers)}.",
        )
    return IGNORED_NOTE


def _check_probe(probe: object, path: Path, origin: Origin) -> None:
    if isinstance(probe, str):
        expect_str(probe, path, origin)
        return
    if not isinstance(probe, Mapping):
        raise origin.error(
            path, f"expected a path like /health or a mapping {{path, ...}}, got {describe(probe)}."
        )
    body = expect_mapping(probe, path, origin)
    check_keys(body, path, origin, PROBE_FIELDS)
    if body.get("path") is not None:
        expect_str(body["path"], path + ("path",), origin)
    for key in ("initial_delay_seconds", "timeout_seconds"):
        if body.get(key) is not None:
            expect_positive_number(body[key], path + (key,), origin)


def _check_policy(policy: object, path: Path, origin: Origin) -> None:
    body = expect_mapping(policy, path, origin, "a mapping (min_replicas, max_replicas, ...)")
    check_keys(body, path, origin, REPLICA_POLICY_FIELDS)
    for key in _COUNT_FIELDS:
        if body.get(key) is not None:
            expect_int(body[key], path + (key,), origin, minimum=0)
    low, high = body.get("min_replicas"), body.get("max_replicas")
    if isinstance(low, int) and isinstance(high, int) and high < low:
        raise origin.error(
            path + ("max_replicas",), f"max_replicas ({high}) is below min_replicas ({low})."
        )
    qps = body.get("target_qps_per_replica")
    if qps is not None and not isinstance(qps, Mapping):  # a mapping: per accelerator
        expect_positive_number(qps, path + ("target_qps_per_replica",), origin)
