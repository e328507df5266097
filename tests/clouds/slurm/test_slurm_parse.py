"""The Slurm parsers on output of 20.11, 22.05 (recorded live), 23.02 and 24.05
(fixtures/*/SOURCE.md says where each came from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.clouds.slurm.parse import (
    Gres,
    SlurmParseError,
    SlurmVersion,
    parse_gres,
    parse_jobs,
    parse_kv_line,
    parse_nodes,
    parse_sinfo,
    parse_squeue,
    parse_time_limit,
    parse_version,
)

FIX = Path(__file__).parent / "fixtures"
VERSIONS = ("20.11", "22.05", "23.02", "24.05")


def read(version: str, name: str) -> str:
    return (FIX / version / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_fixture_parses(version: str) -> None:
    v = parse_version(read(version, "version"))
    assert f"{v.major}.{v.minor:02d}" == version
    assert parse_sinfo(read(version, "sinfo"))
    assert parse_nodes(read(version, "nodes"))
    assert parse_squeue(read(version, "squeue"))
    assert parse_jobs(read(version, "jobs"))


def test_versions_order_and_suffixes() -> None:
    assert parse_version("slurm 24.05.4-1") == SlurmVersion(24, 5, 4)
    assert parse_version("slurm-wlm 22.05.8") == SlurmVersion(22, 5, 8)
    assert parse_version("slurm 20.11.9") < SlurmVersion(21, 8)
    with pytest.raises(SlurmParseError):
        parse_version("bash: sinfo: command not found")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("gpu:a100:4(S:0-1)", [Gres("gpu", "a100", 4)]),
        ("gpu:4", [Gres("gpu", None, 4)]),
        ("gpu:a100", [Gres("gpu", "a100", 1)]),
        ("gpu", [Gres("gpu", None, 1)]),
        ("gpu:v100:2(IDX:0,2)", [Gres("gpu", "v100", 2)]),
        ("gpu:h100:8(S:0-1),shard:h100:64(S:0-1)", [Gres("gpu", "h100", 8), Gres("shard", "h100", 64)]),
        ("gpu:a100:2,gpu:v100:1", [Gres("gpu", "a100", 2), Gres("gpu", "v100", 1)]),
        ("tmp:844G", [Gres("tmp", None, 844 * 1024**3)]),
        ("(null)", []),
        ("", []),
    ],
)
def test_gres_typed_untyped_and_suffixes(text: str, want: list[Gres]) -> None:
    assert parse_gres(text) == want


def test_free_gpus_come_from_allocated_tres_20_11() -> None:
    nodes = {n.name: n for n in parse_nodes(read("20.11", "nodes"))}
    assert (nodes["gv01"].gpus, nodes["gv01"].gpus_allocated, nodes["gv01"].gpus_free) == (4, 2, 2)
    assert nodes["gv01"].gpu_type == "v100" and nodes["gv01"].cpus == 32
    assert nodes["gv02"].gpus_free == 4
    assert not nodes["gv03"].usable and nodes["gv03"].state == "DOWN+NOT_RESPONDING"
    assert nodes["gv04"].gpu_type is None and nodes["gv04"].gpus == 2  # untyped
    assert nodes["gv01"].memory_mib == 191000


def test_free_gpus_from_gres_used_without_gpu_tres_22_05() -> None:
    """Recorded live: no AccountingStorageTRES=gres/gpu, so CfgTRES has no gpu; the
    GPUs come from Gres and the allocated ones from `scontrol -d`'s GresUsed."""
    nodes = {n.name: n for n in parse_nodes(read("22.05", "nodes"))}
    assert (nodes["ltn1"].gpus, nodes["ltn1"].gpus_allocated, nodes["ltn1"].gpu_type) == (4, 2, "a100")
    assert (nodes["ltn2"].gpus, nodes["ltn2"].gpus_allocated, nodes["ltn2"].gpu_type) == (4, 2, None)


def test_typed_and_untyped_tres_are_not_double_counted_23_02() -> None:
    nodes = {n.name: n for n in parse_nodes(read("23.02", "nodes"))}
    assert (nodes["dgx001"].gpus, nodes["dgx001"].gpus_allocated) == (8, 4)
    assert nodes["node01"].gpu_type is None and nodes["node01"].gpus == 8
    assert not nodes["node02"].usable  # MIXED+DRAIN
    assert nodes["dgx001"].usable


def test_other_gres_do_not_count_as_gpus_24_05() -> None:
    nodes = parse_nodes(read("24.05", "nodes"))
    assert [(n.gpus, n.gpus_allocated, n.gpu_type) for n in nodes] == [(8, 3, "h100"), (8, 0, "h100")]


def test_sinfo_default_partition_limits() -> None:
    rows = {r.name: r for r in parse_sinfo(read("20.11", "sinfo"))}
    assert rows["gpu"].default and not rows["debug"].default
    assert rows["gpu"].max_time_min == 2 * 1440 and rows["gpu"].max_nodes == 4
    assert rows["debug"].max_time_min == 30 and rows["debug"].max_nodes == 1
    plain = {r.name: r for r in parse_sinfo(read("23.02", "sinfo"))}["plain"]
    assert plain.max_time_min is None and plain.max_nodes is None
    with pytest.raises(SlurmParseError):
        parse_sinfo("gpu*|up|infinite\n")


def test_sinfo_rows_of_one_partition_merge() -> None:
    rows = parse_sinfo("gpu*|up|infinite|1-infinite|2|a[1-2]\ngpu*|up|infinite|1-infinite|1|b1\n")
    assert len(rows) == 1 and rows[0].node_count == 3


def test_squeue_pending_rows_and_comment_with_bar() -> None:
    rows = parse_squeue(read("23.02", "squeue"))
    assert rows[1].state == "PENDING" and rows[1].nodelist == "" and rows[1].comment == "(null)"
    assert parse_squeue(read("24.05", "squeue"))[0].comment == "launcher-cluster=p|team"


def test_job_states_restarts_and_limits() -> None:
    jobs = {j.job_id: j for j in parse_jobs(read("20.11", "jobs"))}
    assert jobs["4098"].state == "NODE_FAIL" and jobs["4097"].state == "TIMEOUT"
    assert jobs["4097"].reason == "TimeLimit" and jobs["4097"].time_limit_min == 30
    assert jobs["4101"].time_limit_min == 1440 and jobs["4101"].nodelist == "gv01"
    y = {j.job_id: j for j in parse_jobs(read("23.02", "jobs"))}["901"]
    assert (y.state, y.restarts, y.num_nodes, y.nodelist) == ("PENDING", 1, 2, "(null)")
    states = [j.state for j in parse_jobs(read("24.05", "jobs"))]
    assert states == ["RUNNING", "CANCELLED", "COMPLETED"]


def test_kv_values_keep_spaces() -> None:
    kv = parse_kv_line("NodeName=a OS=Linux 5.10 #1 SMP Reason=Not responding [slurm@x] State=DOWN")
    assert kv["OS"] == "Linux 5.10 #1 SMP" and kv["Reason"] == "Not responding [slurm@x]"
    assert kv["State"] == "DOWN"


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("infinite", None), ("UNLIMITED", None), ("30", 30), ("1:00:00", 60), ("2-00:00:00", 2880),
     ("1-12", 2160), ("00:30:30", 31)],
)
def test_time_limits(text: str, minutes: int | None) -> None:
    assert parse_time_limit(text) == minutes
