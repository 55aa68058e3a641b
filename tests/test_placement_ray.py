"""Placement under Ray: the actors of each layout are created with the GPU shares `plan_placement` gives.

Ray's own accounting is the reference: each actor reports `get_assigned_resources()` and the GPU ids Ray
gave it. The machine needs no GPU: the check runs in a fresh process whose Ray instance *declares* two GPUs
(Ray schedules on declared resources), so the shared test Ray instance (no GPUs) is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from roll_pipeline.cluster import RayCluster, disable_uv_runtime_env
    from roll_pipeline.config import WorkerConfig
    from roll_pipeline.strategies_setup import plan_placement

    disable_uv_runtime_env()
    import ray

    class Probe:
        def __init__(self, device):
            self.device = device

        def report(self):
            ctx = ray.get_runtime_context()
            return {"device": self.device, "resources": ctx.get_assigned_resources(),
                    "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    cluster = RayCluster()
    layouts = json.loads(sys.argv[1])
    out = {}
    for layout, roles in layouts.items():
        configs = {name: WorkerConfig.model_validate(role) for name, role in roles.items()}
        handles = {
            name: cluster.spawn(Probe, p.device, name=name, num_cpus=0, num_gpus=p.num_gpus)
            for name, p in plan_placement(configs, "ray").items()
        }
        out[layout] = {name: ray.get(h.report.remote()) for name, h in handles.items()}
        cluster.shutdown()
    print("RESULT " + json.dumps(out))
    ray.shutdown()
    """
)

LAYOUTS = {
    "colocated": {
        "actor_train": {"device_mapping": [0]},
        "actor_infer": {"device_mapping": [0]},
        "reference": {"device_mapping": [0]},
    },
    "separate": {
        "actor_train": {"device_mapping": [0]},
        "actor_infer": {"device_mapping": [1]},
        "reference": {"device_mapping": []},
    },
    "explicit": {
        "actor_train": {"device_mapping": [0, 1]},
        "actor_infer": {"device_mapping": [0], "num_gpus_per_worker": 0.5},
    },
}


def test_actors_get_the_gpu_shares_of_their_layout():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(LAYOUTS)], capture_output=True, text=True, timeout=300
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    got = json.loads(lines[-1].removeprefix("RESULT "))

    def gpus(layout: str, role: str) -> float:
        return got[layout][role]["resources"].get("GPU", 0.0)

    colocated = got["colocated"]
    assert all(gpus("colocated", r) == pytest.approx(1 / 3, abs=1e-4) for r in colocated)
    assert all(r["device"] == "cuda" and len(r["gpu_ids"]) == 1 for r in colocated.values())
    assert gpus("separate", "actor_train") == gpus("separate", "actor_infer") == 1.0
    assert got["separate"]["actor_train"]["gpu_ids"] != got["separate"]["actor_infer"]["gpu_ids"]
    assert gpus("separate", "reference") == 0.0 and got["separate"]["reference"]["device"] == "cpu"
    assert got["separate"]["reference"]["gpu_ids"] == []
    assert gpus("explicit", "actor_train") == 2.0 and len(got["explicit"]["actor_train"]["gpu_ids"]) == 2
    assert gpus("explicit", "actor_infer") == 0.5
