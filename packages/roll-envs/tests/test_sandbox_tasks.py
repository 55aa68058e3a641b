"""The sandbox's tasks: every family and variant is generated deterministically, the splits ask disjoint
questions, and each answer check accepts the right answer and rejects a wrong one (no subprocess here)."""

from __future__ import annotations

import numpy as np
import pytest
from roll_envs.envs.sandbox import FAMILIES, SPLITS, SandboxConfig, check_answer, make_task
from roll_envs.envs.sandbox.tasks import read_regular
from roll_envs.errors import EnvConfigError

VARIANTS = [(family, v) for split in SPLITS.values() for family, variants in split.items() for v in variants]


def test_the_splits_ask_disjoint_questions_of_every_family():
    assert len(FAMILIES) >= 4
    for family in FAMILIES:
        train, held_out = set(SPLITS["train"][family]), set(SPLITS["held_out"][family])
        assert train and held_out and not train & held_out


def test_a_seed_gives_the_same_task_and_a_split_only_its_variants():
    tasks = [make_task(np.random.default_rng(seed), "held_out", tuple(FAMILIES)) for seed in range(40)]
    again = [make_task(np.random.default_rng(seed), "held_out", tuple(FAMILIES)) for seed in range(40)]
    assert tasks == again
    assert {t.family for t in tasks} == set(FAMILIES)
    assert all(t.variant in SPLITS["held_out"][t.family] for t in tasks)


@pytest.mark.parametrize(("family", "variant"), VARIANTS)
def test_each_variant_accepts_its_answer_and_rejects_another(tmp_path, family, variant):
    task = FAMILIES[family](np.random.default_rng(7), variant)
    for name, text in task.files.items():
        (tmp_path / name).write_text(text)
    if task.expected_files:  # a file edit: the untouched file fails, the edited one passes
        assert not check_answer(task, "done", tmp_path)
        for name, text in task.expected_files.items():
            (tmp_path / name).write_text(text)
        assert check_answer(task, "anything", tmp_path)
    else:
        assert check_answer(task, f" {task.answer}\n", tmp_path)
        assert not check_answer(task, task.answer + "9", tmp_path)
        assert not check_answer(task, "", tmp_path)


def test_a_numeric_answer_is_compared_as_a_number():
    task = FAMILIES["table"](np.random.default_rng(3), "revenue_of_region")
    value = float(task.answer)
    assert check_answer(task, repr(value + 0.004), None)
    assert not check_answer(task, repr(value + 0.02), None)
    assert not check_answer(task, "nan", None)


def test_a_checked_file_is_never_read_through_a_link(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("top")
    (tmp_path / "link").symlink_to(secret)
    assert read_regular(secret) == "top"
    assert read_regular(tmp_path / "link") is None
    assert read_regular(tmp_path) is None


def test_an_unknown_family_is_a_config_error_that_names_the_families():
    from roll_envs.config import build_config

    with pytest.raises(EnvConfigError, match="choose from"):
        build_config(SandboxConfig, {"families": ["chess"]}, {}, "sandbox")
