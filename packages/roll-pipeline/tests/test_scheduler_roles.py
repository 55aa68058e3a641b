"""What `build_scheduler` sets per role: only validation's scheduler races its backups (its episodes train
nothing); the training and demonstration schedulers keep every episode that ends (roll_rollout.scheduling.backups)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from roll_pipeline import tiny_config
from roll_pipeline.assembly.settings import rollout_settings
from roll_pipeline.runtime import rollout as rollout_module


@pytest.mark.parametrize(
    ("validation", "demonstration", "races"),
    [(True, False, True), (False, False, False), (False, True, False)],
)
def test_only_validation_races_backups(validation, demonstration, races):
    cfg = tiny_config()
    manager = cfg.val_env_manager if validation else cfg.train_env_manager
    scheduler = rollout_module.build_scheduler(
        rollout_settings(cfg),
        manager,
        SimpleNamespace(),  # no env worker starts before the first get_batch
        SimpleNamespace(),
        None,
        validation=validation,
        demonstration=demonstration,
        seed=0,
        name="x",
    )
    assert scheduler.settings.race_backups is races
    assert scheduler.layout.group_size == manager.group_size
