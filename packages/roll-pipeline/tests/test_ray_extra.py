"""Ray is the `roll-pipeline[ray]` extra: without it `cluster.backend=local` runs, and `cluster.backend=ray` (the
default) is one error saying what to install, from `roll config` / `roll train` before anything starts and from
`RayCluster` for a pipeline built in Python. Ray is installed here, so its absence is simulated."""

from __future__ import annotations

import sys

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.preflight import check_cluster_backend
from roll_pipeline.runtime import cluster as cluster_module
from roll_pipeline.runtime.cluster import ClusterError, RayCluster, make_cluster

FIX = "pip install 'roll-pipeline[ray]'"


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setattr(cluster_module, "ray_installed", lambda: False)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError


def test_the_ray_backend_without_ray_is_a_config_problem_naming_the_extra(no_ray, capsys):
    assert check_cluster_backend(None) == check_cluster_backend({"backend": "ray"}) != []
    assert FIX in check_cluster_backend({})[0] and "cluster.backend=local" in check_cluster_backend({})[0]
    assert check_cluster_backend({"backend": "local"}) == []
    assert cli.main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roll config: 1 problem(s) in the config:") and FIX in err
    assert cli.main(["config", "cluster.backend=local"]) == 0


def test_a_ray_cluster_without_ray_says_what_to_install(no_ray):
    with pytest.raises(ClusterError, match=r"pip install 'roll-pipeline\[ray\]'"):
        RayCluster()
    assert make_cluster("local").cpu_capacity() is None  # the local backend needs no Ray


def test_with_ray_installed_there_is_no_problem():
    assert check_cluster_backend({"backend": "ray"}) == []


def test_roll_train_reports_a_cluster_error_without_a_traceback(monkeypatch, capsys):
    import roll_pipeline.pipeline

    def refuse(*args, **kwargs):
        raise ClusterError("1 of 2 node(s) cannot see the driver's files")

    monkeypatch.setattr(roll_pipeline.pipeline, "AgenticPipeline", refuse)
    assert cli.main(["train", "cluster.backend=local", "max_steps=1"]) == 2
    assert capsys.readouterr().err == "roll train: 1 of 2 node(s) cannot see the driver's files\n"
