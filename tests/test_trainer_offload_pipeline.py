"""The pipeline's step order with an offloaded trainer: offload after each weight sync, reload before training.

The real pipeline (tiny model, in-process) with actor_train's offload forced on (on the CPU nothing is colocated),
so the trainer's real CPU swap runs between steps: every generate call falls while it is offloaded, every
optimiser step while it is loaded, and each step logs the offload metrics."""

from __future__ import annotations

import json

import pytest
from roll_pipeline.assembly import parts as parts_module
from roll_strategies import HFTrainStrategy
from small_runs import compact, record_policy_server, run_two_steps_in_process


@pytest.mark.slow
def test_each_step_reloads_before_training_and_offloads_after_the_weight_sync(tmp_path, monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(parts_module, "offloaded_roles", lambda roles, names: ("actor_train",))
    for name in ("offload", "reload", "train_step"):
        original = getattr(HFTrainStrategy, name)

        def recorded(self, *args, _name=name, _original=original, **kwargs):
            events.append(_name.removesuffix("_step"))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(HFTrainStrategy, name, recorded)
    record_policy_server(monkeypatch, events)
    pipeline = run_two_steps_in_process(tmp_path)
    compacted = compact(events)  # runs of one kind as one
    # weights, offload, validation; per step: rollout, reload, train, weights, offload; validation at the end,
    # then the checkpoint, written from the GPU (reload, save, offload)
    step = ["generate", "reload", "train", "weights", "offload"]
    assert compacted == ["weights", "offload", *step, *step, "generate", "reload", "offload"], events
    rows = [json.loads(line) for line in (pipeline.parts.run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "time/step_total" in r]
    assert trained and all(
        r["time/offload_s"] >= 0 and r["time/reload_s"] >= 0 and r["memory/offloaded_gb"] > 0 for r in trained
    )
    assert all(r["memory/offload_gpu_freed_gb"] == 0 for r in trained)  # the CPU: no GPU memory
