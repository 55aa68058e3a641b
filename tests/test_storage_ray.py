"""The storage check on Ray actors: a probe pinned to every node reads the driver's token file back.

The session's Ray instance has one node, which shares the driver's disk: the check passes. A probe that sees
another disk (every path it is given remapped under its own empty folder, as on a node without the shared
filesystem) is named in the error by its Ray node id and host. tests/test_ray_two_nodes.py runs the check on
a real second node.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from roll_pipeline.runtime.cluster import ClusterError, RayCluster
from roll_pipeline.runtime.storage import TOKEN_PREFIX, StorageError, StorageProbe, confirm_shared_storage

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class OtherDiskProbe:
    """A node with a disk of its own: the driver's paths lead to an empty folder there."""

    def check(self, token_file: str, token: str, model_path: str) -> list[str]:
        root = Path(token_file).parent / "other_disk"
        return StorageProbe().check(
            str(root / Path(token_file).name), token, str(root / Path(model_path).name)
        )


class SilentProbe:
    """A node whose probe never answers (an actor that cannot start there looks the same to the driver)."""

    def check(self, *args: str) -> list[str]:
        import time

        time.sleep(3600)
        return []


@pytest.fixture()
def ray(ray_session):
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probes travel by value
    return ray_session


def test_every_node_of_a_ray_cluster_sees_the_driver_s_files(ray, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    cluster = RayCluster()
    try:
        confirm_shared_storage(cluster, tmp_path, model)
        with pytest.raises(StorageError) as caught:
            confirm_shared_storage(cluster, tmp_path, model, probe=OtherDiskProbe)
    finally:
        cluster.shutdown()
    node = ray.get_runtime_context().get_node_id()
    text = str(caught.value)
    assert text.startswith("1 of 1 node(s) cannot see the driver's files")
    assert f"node {node} (host " in text and "cannot read the run folder's check file" in text
    assert "has no model folder" in text and "NFS" in text
    assert not list(tmp_path.glob(f"{TOKEN_PREFIX}*"))
    assert cluster.cpu_capacity().largest_node == 2.0  # the session's instance (tests/conftest.py)


def test_a_node_whose_probe_does_not_answer_is_named_in_the_error(ray, tmp_path):
    cluster = RayCluster()
    try:
        with pytest.raises(ClusterError, match=r"within 2 s, but 1 of 1 did not answer: node ") as caught:
            cluster.on_each_node(SilentProbe, "check", str(tmp_path), "token", str(tmp_path), timeout_s=2)
    finally:
        cluster.shutdown()
    assert ray.get_runtime_context().get_node_id() in str(caught.value)
