"""The storage check at start: a node that cannot see the driver's run folder or the model folder is one
error naming the node, the path and the fix (no Ray here; tests/test_storage_ray.py runs it on Ray actors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from roll_pipeline.runtime.cluster import LocalCluster
from roll_pipeline.runtime.storage import TOKEN_PREFIX, StorageError, StorageProbe, confirm_shared_storage


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    return folder


def test_the_probe_names_what_a_node_cannot_see(tmp_path, model):
    token_file = tmp_path / "token"
    token_file.write_text("abc")
    assert StorageProbe().check(str(token_file), "abc", str(model)) == []
    other = StorageProbe().check(str(token_file), "xyz", str(tmp_path / "missing"))
    assert "another disk is mounted" in other[0] and "has no model folder" in other[1]
    missing = StorageProbe().check(str(tmp_path / "nothing"), "abc", str(model))
    assert missing == [f"cannot read the run folder's check file {tmp_path / 'nothing'} (FileNotFoundError)"]


def test_in_process_the_check_is_one_read_and_leaves_no_file(tmp_path, model):
    confirm_shared_storage(LocalCluster(), tmp_path, model)
    assert not list(tmp_path.glob(f"{TOKEN_PREFIX}*"))


class TwoNodes:
    """A cluster of two nodes; the second mounts its own disk where the driver's run folder and model are."""

    def on_each_node(self, cls: type, method: str, *args: Any) -> dict[str, Any]:
        token_file, token, _ = args
        elsewhere = Path(token_file).parent / "elsewhere"
        return {
            "node aaa (host head)": getattr(cls(), method)(*args),
            "node bbb (host worker-2)": getattr(cls(), method)(
                str(elsewhere / Path(token_file).name), token, str(elsewhere / "model")
            ),
        }


def test_a_node_without_the_shared_disk_is_named_with_the_paths_and_the_fix(tmp_path, model):
    with pytest.raises(StorageError) as caught:
        confirm_shared_storage(TwoNodes(), tmp_path, model)
    text = str(caught.value)
    assert text.startswith("1 of 2 node(s) cannot see the driver's files")
    assert "node bbb (host worker-2) cannot read the run folder's check file" in text
    assert "node aaa" not in text
    assert "has no model folder" in text
    assert f"run folder {tmp_path}" in text and f"model from {model}" in text
    assert "shared filesystem such as NFS" in text and "same path on every node" in text
    assert not list(tmp_path.glob(f"{TOKEN_PREFIX}*"))  # removed even when the check fails
