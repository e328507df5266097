"""Property tests: task round trips, candidate expansion invariants, and fuzzing that
no input escapes as anything but a TaskValidationError."""

from __future__ import annotations

import json
import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import TaskValidationError
from launcher.task.model import TASK_FIELDS, Task
from launcher.task.resources_parser import ENTRY_FIELDS, SECTION_FIELDS

GPU_NAMES = ["H100", "A100", "A100-80GB", "L4", "T4", "H200"]
COUNTS = [0.25, 0.5, 1, 2, 4, 8]

choice_text = st.builds(
    lambda n, c: f"{n}:{c}", st.sampled_from(GPU_NAMES), st.sampled_from(COUNTS)
)
accelerators = st.one_of(
    choice_text,
    st.builds(lambda n, c: {n: c}, st.sampled_from(GPU_NAMES), st.sampled_from(COUNTS)),
    st.lists(choice_text, min_size=1, max_size=3),
    st.lists(choice_text, min_size=2, max_size=3, unique=True).map(lambda xs: dict.fromkeys(xs)),
)
names = st.text(string.ascii_lowercase + "-", min_size=1, max_size=8).filter(lambda s: s[0] != "-")
entry = st.fixed_dictionaries(
    {},
    optional={
        "accelerators": accelerators,
        "cloud": st.sampled_from(["aws", "gcp", "azure", "local", "lambda"]),
        "region": names,
        "use_spot": st.booleans(),
        "cpus": st.one_of(st.integers(1, 256), st.integers(1, 256).map(lambda n: f"{n}+")),
        "memory": st.one_of(st.integers(1, 2048), st.integers(1, 2048).map(lambda n: f"{n}+")),
        "disk_size": st.integers(1, 10_000),
        "disk_tier": st.sampled_from(["low", "medium", "high", "best"]),
        "ports": st.lists(st.integers(1, 65535), min_size=1, max_size=3),
        "labels": st.dictionaries(names, names, max_size=2),
        "max_hourly_cost": st.floats(0.01, 1000, allow_nan=False),
        "network": st.fixed_dictionaries(
            {"fabric": st.sampled_from(["infiniband", "efa", "roce", "rdma", "any"])},
            optional={"min_gbps": st.sampled_from([100, 400, 3200])},
        ),
        "instance_type": names,
    },
)
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


@st.composite
def task_dicts(draw: st.DrawFn) -> dict[str, object]:
    resources = dict(draw(entry))
    mode = draw(st.sampled_from([None, "any_of", "ordered"]))
    if mode:
        resources[mode] = draw(st.lists(entry, min_size=1, max_size=3))
    if draw(st.booleans()):
        resources["job_recovery"] = draw(
            st.fixed_dictionaries(
                {"strategy": st.sampled_from(["FAILOVER", "EAGER_NEXT_REGION", None])},
                optional={
                    "max_restarts_on_errors": st.integers(0, 10),
                    "recover_on_exit_codes": st.lists(st.integers(0, 255), unique=True, max_size=3),
                },
            )
        )
    elif draw(st.booleans()):
        resources["job_recovery"] = draw(
            st.fixed_dictionaries(
                {"strategy": st.just("deadline"),
                 "deadline": st.sampled_from(["36h", "2d", "1d12h", "2026-11-27T18:00Z"]),
                 "duration": st.sampled_from(["20h", "90m", "1d"])},
                optional={
                    "restart_overhead": st.sampled_from(["15m", "1h", "30s"]),
                    "progress": st.sampled_from(["wall", "reported"]),
                    "policy": st.sampled_from(["launcher", "greedy", "uniform_progress"]),
                },
            )
        )
    if draw(st.booleans()):
        resources["autostop"] = draw(st.one_of(st.integers(0, 600), st.booleans()))
    task: dict[str, object] = {
        "name": draw(names),
        "num_nodes": draw(st.integers(1, 16)),
        "resources": resources,
        "envs": draw(
            st.dictionaries(env_names, st.text(string.printable, max_size=10), max_size=3)
        ),
        "run": draw(st.text(max_size=30)),
    }
    if draw(st.booleans()):
        task["checkpoint"] = draw(
            st.one_of(
                st.just("/ckpt"),
                st.just("s3://bucket/run"),
                st.just({"path": "~/c", "store": "gs://b/p"}),
            )
        )
    return task


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(task_dicts())
def test_dict_round_trip(d: dict[str, object]) -> None:
    task = Task.from_dict(d, base_dir="/base")
    # through JSON, as the managed-jobs store keeps it
    again = Task.from_dict(
        json.loads(json.dumps(task.to_dict(include_secrets=True))), base_dir="/base"
    )
    assert again == task
    assert again.candidates() == task.candidates()


@SETTINGS
@given(task_dicts())
def test_yaml_text_equals_dict(d: dict[str, object]) -> None:
    from_dict = Task.from_dict(d, base_dir="/base")
    from_text = Task.from_yaml_str(yaml.safe_dump(d, sort_keys=False), base_dir="/base")
    assert from_text == from_dict


@SETTINGS
@given(task_dicts())
def test_candidate_expansion_invariants(d: dict[str, object]) -> None:
    task = Task.from_dict(d)
    cands = task.candidates()
    spec = task.resources
    expected_max = 0
    for res in spec.expanded():
        n = len(res.accelerators.choices) if res.accelerators else 1
        expected_max += n
    assert 1 <= len(cands) <= expected_max
    assert len(set(cands)) == len(cands)
    prefs = sorted({c.preference for c in cands})
    assert prefs == list(range(len(prefs)))  # dense ranks from 0
    assert [c.preference for c in cands] == sorted(c.preference for c in cands)
    unordered = not spec.ordered and all(
        r.accelerators is None or not r.accelerators.ordered for r in spec.expanded()
    )
    if unordered:
        assert prefs == [0]
    for cand in cands:
        assert (cand.accelerator is None) == (cand.accelerator_count == 0)
        assert cand.accelerator is None or cand.accelerator in GPU_NAMES


# -------------------------------------------------------------------- fuzzing

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True), st.text(max_size=12),
    st.sampled_from(["H100:8", "8+", "aws/us-east-1", "rdma", "36h", "FAILOVER", "{A:1, B:2}", "[x:1]"]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from([*SECTION_FIELDS, "fabric", "min_gbps", "x"]), inner, max_size=3
        ),
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*TASK_FIELDS, "bogus"]), values, max_size=4),
    st.dictionaries(st.sampled_from(ENTRY_FIELDS), values, max_size=4),
)
def test_arbitrary_data_only_raises_task_validation_error(
    top: dict[str, object], res: dict[str, object]
) -> None:
    for d in (top, {**top, "resources": res}):
        try:
            task = Task.from_dict(d)
        except TaskValidationError as err:
            assert "\n" not in str(err)
            assert err.field is None or err.field.split(".")[0].split("[")[0] in d or err.field in d
        else:
            task.candidates()
            task.to_dict()


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=string.printable + "éß:{}[]-&*!|>", max_size=80))
def test_arbitrary_text_only_raises_task_validation_error(text: str) -> None:
    try:
        Task.from_yaml_str(text)
    except TaskValidationError as err:
        assert "\n" not in str(err)
