"""The pipeline joins an existing Ray cluster (`cluster.address`) of two nodes and runs steps on both.

The cluster is `ray.cluster_utils.Cluster` (a head and a second raylet on this machine, each its own
node with its own object store). It runs in a subprocess so this test session's own local Ray
instance (`ray_session`) is not in the way. The actors ask for the CPUs `plan_cpus` gives them (Ray's own
accounting, `get_assigned_resources`, is the reference), and the storage check probes both nodes: here
they share one disk, and a probe that sees another disk on the second node only gets that node named.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from roll_pipeline.runtime.cluster import disable_uv_runtime_env
    disable_uv_runtime_env()
    import ray
    from ray.cluster_utils import Cluster
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.config.compose import compose

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    overrides = [
        f"cluster.address={cluster.address}", f"output_dir={sys.argv[1]}", "exp_name=two_nodes",
        "max_steps=2", "save_steps=2", "eval_steps=2", "print_baselines=false",
        "train_env_manager.num_env_groups=4", "train_env_manager.group_size=4",
        "train_env_manager.max_env_num_per_worker=4", "val_env_manager.num_env_groups=8",
        "val_env_manager.max_env_num_per_worker=4", "custom_envs.FrozenLake.max_actions_per_traj=3",
        "actor_train.training_args.per_device_train_batch_size=16",
    ]
    pipeline = AgenticPipeline(compose(None, None, overrides), progress=False)
    def where(self):
        context = ray.get_runtime_context()
        return context.get_node_id(), context.get_assigned_resources().get("CPU", 0.0)
    # env workers are killed when their rollout stops: note where each ran before it goes
    placed, kill = [], pipeline.parts.cluster.kill
    def noting_kill(handle):
        try:
            placed.append(ray.get(handle.__ray_call__.remote(where), timeout=60))
        except Exception:
            pass
        kill(handle)
    pipeline.parts.cluster.kill = noting_kill
    summary = pipeline.run()
    found = placed + ray.get([a.__ray_call__.remote(where) for a in pipeline.parts.cluster._actors])
    from roll_pipeline.runtime.storage import StorageError, StorageProbe, confirm_shared_storage
    head = ray.get_runtime_context().get_node_id()
    class SecondNodeOwnDisk:  # the second node mounts a disk of its own where the run folder is
        def check(self, token_file, token, model_path):
            if ray.get_runtime_context().get_node_id() != head:
                token_file = token_file + ".elsewhere"
            return StorageProbe().check(token_file, token, model_path)
    try:
        confirm_shared_storage(pipeline.parts.cluster, pipeline.parts.run_dir, pipeline.parts.model_path, SecondNodeOwnDisk)
        storage_error = ""
    except StorageError as exc:
        storage_error = str(exc)
    pipeline.close()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    print("RESULT " + json.dumps({"steps": summary.steps, "actors": len(found),
                                  "nodes": sorted({node for node, _ in found}),
                                  "cpus": sorted({cpus for _, cpus in found}), "cluster_nodes": len(nodes),
                                  "storage_named": [n == head for n in nodes if n in storage_error],
                                  "storage_error": storage_error}))
    ray.shutdown()
    cluster.shutdown()
    """
)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_on_an_existing_two_node_cluster_uses_both_nodes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["steps"] == 2 and result["cluster_nodes"] == 2
    assert len(result["nodes"]) == 2, result  # actors on both nodes
    # env workers ask for 0.05 CPU; the two CPU roles share the rest: (2 - 6 env workers x 0.05) / 2
    assert result["cpus"] == [0.05, 0.85], result
    assert result["storage_named"] == [False], result["storage_error"]  # the second node, not the head
    assert "1 of 2 node(s) cannot see the driver's files" in result["storage_error"]
    rows = (tmp_path / "two_nodes" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(rows[-1])["step"] == 2
