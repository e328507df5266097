"""SkyPilot storage mounts in `file_mounts` ({name, source, store, mode, persistent}):
the typed model, SkyPilot's defaults, and one-paragraph errors naming field and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import TaskValidationError
from launcher.task.model import Task
from launcher.task.storage import StorageMount, store_of_uri


def _mounts(body: str, base: Path | None = None) -> dict[str, StorageMount]:
    text = "run: echo\nfile_mounts:\n" + body
    return Task.from_yaml_str(text, source="t.yaml", base_dir=str(base) if base else None
                              ).storage_mounts


def test_existing_bucket_defaults_to_skypilot_mount_mode() -> None:
    (m,) = _mounts("  /data:\n    source: s3://my-bucket/train\n").values()
    assert m == StorageMount(name=None, source="s3://my-bucket/train", store="s3",
                             mode="MOUNT", persistent=True)
    assert m.bucket_uri == "s3://my-bucket/train" and not m.source_is_local


def test_name_only_is_a_new_s3_bucket_and_local_source_is_resolved(tmp_path: Path) -> None:
    mounts = _mounts("  ~/out: {name: out-bkt, mode: copy}\n"
                     "  /code:\n    name: code-bkt\n    source: ./src\n    mode: COPY\n"
                     "    persistent: false\n", tmp_path)
    out, code = mounts["~/out"], mounts["/code"]
    assert (out.name, out.source, out.store, out.mode) == ("out-bkt", None, "s3", "COPY")
    assert out.bucket_uri == "s3://out-bkt"
    assert code.source == str(tmp_path / "src") and code.source_is_local
    assert code.persistent is False and code.bucket_uri == "s3://code-bkt"


@pytest.mark.parametrize(("uri", "store"), [
    ("s3://b/x", "s3"), ("gs://b", "gcs"), ("r2://b/p", "r2"), ("cos://us-east/b", "ibm"),
    ("oci://b", "oci"), ("https://acct.blob.core.windows.net/ctr", "azure"),
    ("https://example.com/x", None), ("ftp://b", None),
])
def test_store_is_inferred_from_the_uri(uri: str, store: str | None) -> None:
    assert store_of_uri(uri) == store


def test_planned_for_every_store_and_round_trips() -> None:
    task = Task.from_yaml_str(
        "run: echo\nfile_mounts:\n  /a: {source: gs://g-bkt/x, mode: MOUNT_CACHED}\n"
        "  /b: {name: az-bkt, store: azure}\n  /c: s3://plain/uri\n")
    assert task.storage_mounts["/a"].store == "gcs" and task.file_mounts == {"/c": "s3://plain/uri"}
    assert Task.from_dict(task.to_dict()) == task  # managed jobs store the task this way


def test_envs_are_substituted() -> None:
    task = Task.from_yaml_str("run: echo\nenvs: {B: env-bkt}\nfile_mounts:\n"
                              "  /d: {source: s3://$B/p, mode: COPY}\n")
    assert task.storage_mounts["/d"].source == "s3://env-bkt/p"


def test_missing_local_source_is_reported_by_check_local_paths(tmp_path: Path) -> None:
    task = Task.from_yaml_str("run: echo\nfile_mounts:\n  /d: {name: x-bkt, source: ./nope}\n",
                              source="t.yaml", base_dir=str(tmp_path))
    with pytest.raises(TaskValidationError, match=r"file_mounts\./d\.source.*does not exist"):
        task.check_local_paths()


@pytest.mark.parametrize(("body", "field", "line", "fragment"), [
    ("  /d:\n    bucket: x\n", "file_mounts./d.bucket", 4, "unknown field 'bucket'"),
    ("  /d:\n    source: s3://b\n    mode: mount-ish\n", "file_mounts./d.mode", 5,
     "unknown mode 'mount-ish'"),
    ("  /d:\n    name: b-bkt\n    store: azur\n", "file_mounts./d.store", 5,
     "did you mean 'azure'?"),
    ("  /d:\n    source: gs://b\n    store: s3\n", "file_mounts./d.store", 5,
     "does not match the source"),
    ("  /d:\n    name: s3://b\n", "file_mounts./d.name", 4, "'name' is a bare bucket name"),
    ("  /d:\n    name: b-bkt\n    source: s3://other\n", "file_mounts./d.name", 4,
     "not both"),
    ("  /d:\n    source: []\n", "file_mounts./d.source", 4, "list of local sources"),
    ("  /d:\n    source: ftp://b/x\n", "file_mounts./d.source", 4, "not a bucket URI"),
    ("  /d:\n    source: s3://b\n    persistent: 'yes'\n", "file_mounts./d.persistent", 5,
     "true or false"),
    ("  /d:\n    source: s3://b\n    mode: 3\n", "file_mounts./d.mode", 5, "expected a string"),
])
def test_bad_storage_mounts_name_the_field(body: str, field: str, line: int,
                                           fragment: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml_str("run: echo\nfile_mounts:\n" + body, source="t.yaml")
    message = str(err.value)
    assert err.value.field == field, message
    assert err.value.line == line, message
    assert fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize(("body", "line", "fragment"), [
    ("  /d: {}\n", 3, "no 'name' given"),
    ("  /d:\n    name: Bad_Name\n", 4, "'Bad_Name' is not a valid bucket name"),
    ("  /d:\n    source: ./local\n", 3, "a local 'source' is uploaded to a bucket"),
])
def test_placeholder_names_are_planned_and_refused_at_launch(body: str, line: int,
                                                             fragment: str) -> None:
    task = Task.from_yaml_str("run: echo\nfile_mounts:\n" + body, source="t.yaml")
    assert any(n.startswith("file_mounts./d.name:") for n in task.notes)
    with pytest.raises(TaskValidationError) as err:
        task.check_values()
    message = str(err.value)
    assert err.value.field == "file_mounts./d.name", message
    assert err.value.line == line, message
    assert fragment in message and "real bucket name" in message, message
