"""Hosting hints (`roll_envs.hints`): a hint counts only where the class declaring it vouches for every method
that runs, so a subclass of a built-in game adding code of its own does not inherit `never_blocks` or
`owns_random_state`; `check_env` and `roll-envs check` say which hints an env carries and where from."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import pytest
import roll_envs
from roll_envs import FrozenLakeConfig, FrozenLakeEnv, SokobanEnv, cli
from roll_envs.base import ActionOutcome
from roll_envs.hints import HINTS, declares_never_blocks, declares_own_random_state, hint_report, hint_status


class JudgedLake(FrozenLakeEnv):
    """A subclass whose step waits on a judge: neither inherited hint is true of it."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        time.sleep(0.001)
        return super().step(action)


class LuckyLake(FrozenLakeEnv):
    """Overrides a hook `step` calls (not `step` itself), drawing from the process-wide `random`."""

    def apply_action(self, action: str) -> ActionOutcome:
        return super().apply_action(action if random.random() < 0.9 else "Left")


class Redeclared(JudgedLake):
    """Its author vouches for `owns_random_state` again (the sleep draws nothing), not for `never_blocks`."""

    owns_random_state = True


class BigLakeConfig(FrozenLakeConfig):
    size: int = 6


class BigLake(FrozenLakeEnv):
    """Only class attributes and setup code: the hints hold (roll never hosts `__init__` or `instruction`)."""

    config_cls = BigLakeConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    @property
    def instruction(self) -> str:
        return "Big lake. " + super().instruction


class Stepper:
    def step(self, action: str) -> Any:
        raise NotImplementedError


class MixedIn(Stepper, FrozenLakeEnv):
    """A mixin's `step` runs first: the declaring FrozenLakeEnv cannot vouch for it."""


class Shadowed(FrozenLakeEnv, Stepper):
    """The mixin's `step` never runs (BaseEnv's comes first in the MRO): nothing to drop."""


def test_a_subclass_adding_code_does_not_inherit_the_hints():
    for cls, method in ((JudgedLake, "step"), (LuckyLake, "apply_action"), (MixedIn, "step")):
        assert not declares_never_blocks(cls()) and not declares_own_random_state(cls()), cls
        status = hint_status(cls, "never_blocks")
        assert status.declared and status.declared_by is FrozenLakeEnv and not status.holds
        assert [name for name, _ in status.overrides] == [method]
    assert hint_status(MixedIn, "owns_random_state").overrides == (("step", Stepper),)


def test_a_hint_holds_where_declared_again_or_where_no_code_was_added():
    assert declares_own_random_state(Redeclared()) and not declares_never_blocks(Redeclared())
    assert hint_status(Redeclared, "owns_random_state").declared_by is Redeclared
    for cls in (BigLake, Shadowed):
        assert declares_never_blocks(cls()) and declares_own_random_state(cls()), cls
    false = type("NoLongerDeclared", (FrozenLakeEnv,), {"never_blocks": False})
    assert not declares_never_blocks(false) and declares_own_random_state(false)
    assert not declares_never_blocks(type("Truthy", (FrozenLakeEnv,), {"never_blocks": "yes"}))


def test_every_built_in_keeps_the_hints_its_class_declares():
    for env_id in roll_envs.list_envs():
        if env_id == "gym_adapter":  # needs a gym id; the taxi and cliff_walking entries are this class
            continue
        env = roll_envs.make(env_id)
        for name in HINTS:
            declared = vars(type(env)).get(name, False) is True
            assert hint_status(env, name).holds == declared, (env_id, name)


def test_check_env_notes_a_dropped_hint_and_the_cli_lists_every_hint(monkeypatch, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="roll_envs.checker_random"):
        assert roll_envs.check_env(JudgedLake(), raise_on_error=False) == []
    notes = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(notes) == 2 and all("declared True by FrozenLakeEnv" in n for n in notes), notes
    assert "declare `never_blocks = True` on JudgedLake" in notes[1]

    monkeypatch.setattr(cli, "build_env", lambda target, settings: Redeclared())
    assert cli.main(["check", "anything:Redeclared"]) == 0
    out = capsys.readouterr().out
    assert "owns_random_state: holds (declared by Redeclared)" in out
    assert "never_blocks: dropped: declared True by FrozenLakeEnv, but Redeclared runs code" in out
    assert "step (JudgedLake)" in out
    assert hint_report(SokobanEnv) == [
        "owns_random_state: holds (declared by SokobanEnv)",
        "never_blocks: holds (declared by SokobanEnv)",
    ]
    assert hint_report(roll_envs.BaseEnv)[1] == "never_blocks: not declared (set False by BaseEnv)"


@pytest.mark.parametrize("name", HINTS)
def test_the_hints_are_read_from_the_class_not_an_instance(name):
    env = JudgedLake()
    setattr(env, name, True)  # an instance attribute is no declaration
    assert not hint_status(env, name).holds


def test_an_instance_whose_config_makes_a_hint_false_withdraws_it(monkeypatch):
    """A `needs_detour` reset draws rooms until one needs a detour (hundreds, where a default reset draws one: tens
    of ms to seconds that would hold the event loop), so that Sokoban instance does not claim `never_blocks`;
    nor does one with a deep reverse play. The class keeps the hint, and so do instances of default rooms."""
    from roll_envs.envs.sokoban import rules

    drawn = []
    generate = rules.generate_room
    monkeypatch.setattr(rules, "generate_room", lambda *args: drawn.append(args) or generate(*args))
    plain, detour = roll_envs.make("sokoban"), roll_envs.make("sokoban", needs_detour=True)
    counts = []
    for env in (plain, detour):
        drawn.clear()
        for seed in range(4):
            env.reset(seed=seed)
        counts.append(len(drawn))
    assert counts[0] == 4 and counts[1] > 100, counts
    assert declares_never_blocks(plain) and not declares_never_blocks(detour)
    assert declares_own_random_state(detour) and hint_status(SokobanEnv, "never_blocks").holds
    assert hint_report(detour)[1] == (
        "never_blocks: withdrawn: declared True by SokobanEnv, but this instance sets it False (its config)"
    )
    assert declares_never_blocks(roll_envs.make("sokoban", search_depth=rules.SHORT_SEARCH_DEPTH))
    assert not declares_never_blocks(roll_envs.make("sokoban", search_depth=rules.SHORT_SEARCH_DEPTH + 1))
    lake = roll_envs.make("frozen_lake")
    lake.owns_random_state = False  # any env may withdraw a hint on itself, never declare one (above)
    assert not declares_own_random_state(lake) and declares_own_random_state(roll_envs.make("frozen_lake"))
