"""What a spot trace file records: on which cloud, where, and on what machine.

    {"metadata": {"gap_seconds": 600, "cloud": "aws", "region": "us-east-2",
                  "zone": "use2-az1", "instance_type": "p5.48xlarge",
                  "accelerator": "H100:8", "nodes": 1, "synthetic": "how it was made"},
     "data": [...]}

Every key but `gap_seconds` is optional. What the metadata does not say is read, where
possible, from the naming of the public SkyPilot traces: the file
`{zone}_{device}_{count}.json` (`us-west-2a_v100_8.json`: zone us-west-2a, 8 V100s per
instance) in a directory named `{cloud}-MM-DD-YYYY` (`aws-02-15-2023`). `launcher jobs simulate` labels each trace with
this, and prices a trace from the task's placement on the same cloud, zone and machine
(`matches`), never from an unrelated one without saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TraceOrigin", "origin_from", "region_of"]

_KEYS = ("cloud", "region", "zone", "instance_type", "accelerator", "synthetic")
_DIR_RE = re.compile(r"^([a-z]+)-\d{2}-\d{2}-\d{4}$")  # aws-02-15-2023
_NAME_RE = re.compile(r"^(?P<zone>[^_]+)_(?P<device>[A-Za-z0-9.-]+)_(?P<count>\d+)$")
_AWS_ZONE_NAME = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)[a-z]$")  # us-west-2a
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")  # us-central1-a


class OriginError(ValueError):
    """A metadata field of the wrong type (the message names it)."""


@dataclass(frozen=True, slots=True)
class TraceOrigin:
    """Where and on what a trace was recorded (None: not said)."""

    file: str
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = None  # "H100:8", or a device name ("V100")
    nodes: int | None = None
    synthetic: str | None = None  # how a made-up trace was made
    from_file_name: bool = False  # some fields come from the file and directory names

    def describe(self) -> str:
        """ "aws us-east-2 use2-az1 p5.48xlarge (H100:8), 1 node, synthetic" or, with
        nothing known, "unknown cloud and machine"."""
        where = " ".join(x for x in (self.cloud, self.region if self.region != self.zone
                                     else None, self.zone) if x)
        what = self.instance_type or ""
        if self.accelerator:
            what = f"{what} ({self.accelerator})" if what else self.accelerator
        parts = [" ".join(x for x in (where, what) if x) or "unknown cloud and machine"]
        if self.nodes is not None:
            parts.append(f"{self.nodes} node{'s' if self.nodes != 1 else ''}")
        if self.synthetic:
            parts.append("synthetic")
        elif self.from_file_name:
            parts.append("from the file name")
        return ", ".join(parts)

    def matches(self, cloud: str, region: str, zone: str | None, instance_type: str,
                accelerator: str | None) -> bool:
        """Is a placement (cloud, region, zone, instance type, accelerator) the one this
        trace records? Every field the trace gives must agree: the zone as the catalog
        names it (an AWS zone ID, a GCP zone) or, for an AWS zone name such as
        `us-west-2a` (which maps to IDs per account), its region; the instance type, else
        the accelerator model. A trace that gives neither cloud nor machine matches
        nothing."""
        if self.cloud is None and self.instance_type is None:
            return False
        if self.cloud is not None and self.cloud != cloud:
            return False
        if self.region is not None and self.region != region:
            return False
        if self.zone is not None and self.zone not in (zone, region) \
                and region_of(self.cloud, self.zone) != region:
            return False
        if self.instance_type is not None:
            return self.instance_type == instance_type
        if self.accelerator is not None:
            model = self.accelerator.split(":")[0].lower()
            return (accelerator or "").lower() == model
        return True


def region_of(cloud: str | None, zone: str) -> str | None:
    """The region of a zone name that spells it (`us-west-2a`, `us-central1-a`)."""
    if cloud in (None, "aws"):
        m = _AWS_ZONE_NAME.match(zone)
        if m:
            return m.group(1)
    if cloud in (None, "gcp"):
        m = _GCP_ZONE.match(zone)
        if m:
            return m.group(1)
    return None


def _text(meta: dict[str, Any], key: str, source: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise OriginError(f"{source}: 'metadata.{key}' must be a non-empty string, got {value!r}")
    return value.strip()


def origin_from(meta: dict[str, Any], source: str, path: Path | None = None) -> TraceOrigin:
    """The origin from a trace's `metadata` (validated: OriginError names a bad field),
    completed from the file's name and directory when `path` is given."""
    fields: dict[str, Any] = {key: _text(meta, key, source) for key in _KEYS}
    nodes = meta.get("nodes")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        raise OriginError(f"{source}: 'metadata.nodes' must be a whole number >= 1, got {nodes!r}")
    fields["nodes"] = nodes
    named = False
    if path is not None:
        m = _NAME_RE.match(path.stem)
        if m:
            device = f"{m.group('device').upper()}:{m.group('count')}"
            for key, value in (("zone", m.group("zone")), ("accelerator", device)):
                if fields[key] is None:
                    fields[key], named = value, True
        d = _DIR_RE.match(path.parent.name)
        if fields["cloud"] is None and d:
            fields["cloud"], named = d.group(1), True
    return TraceOrigin(file=path.name if path is not None else source, from_file_name=named,
                       **fields)
