"""One translation of the config: `assembly.settings.run_settings` is the only reader of `AgenticConfig` below
the entry points; the parts and the loop read its frozen `RunSettings`. The demonstration steps are one phase
object (`trainer.demonstration.Demonstration`), not a flag handed from component to component."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from pathlib import Path

import pytest
from roll_pipeline import tiny_config
from roll_pipeline.assembly.settings import RunSettings, run_settings, update_schedule
from roll_pipeline.trainer.demonstration import Demonstration, sft_loss

SRC = Path(__file__).resolve().parents[1] / "src" / "roll_pipeline"
BUNDLE_READERS = [SRC / "assembly" / "parts.py", SRC / "pipeline.py", *sorted((SRC / "trainer").glob("*.py"))]
"""The modules that read the run's settings only through the bundle."""


def config_reads(source: str) -> list[str]:
    """Each attribute read (or `getattr`) of a config object in `source`: a parameter annotated `AgenticConfig`,
    `self.config`, and any name assigned one of them."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        configs = {"self.config"} | {
            a.arg for a in params if a.annotation is not None and "AgenticConfig" in ast.unparse(a.annotation)
        }
        for node in ast.walk(fn):  # aliases: cfg = config; cfg, t = self.config, {}
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    pairs = (
                        zip(target.elts, node.value.elts, strict=False)
                        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                        else [(target, node.value)]
                    )
                    configs |= {
                        t.id for t, v in pairs if isinstance(t, ast.Name) and ast.unparse(v) in configs
                    }
        for node in ast.walk(fn):
            read = isinstance(node, ast.Attribute) and ast.unparse(node.value) in configs
            got = isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" and node.args
            if read or (got and ast.unparse(node.args[0]) in configs):
                found.append(f"{fn.name}: {ast.unparse(node)}")
    return found


def test_the_check_finds_an_injected_config_read():
    """The check itself: a config parameter's attribute, through an alias, a getattr or `self.config`, is a read;
    the bundle's attributes are not."""
    source = (
        "def a(config: AgenticConfig, s: RunSettings):\n    cfg = config\n    return cfg.seed, s.seed\n"
        "def b(config: 'AgenticConfig'):\n    return getattr(config, 'critic')\n"
        "class P:\n    async def c(self):\n        cfg, t = self.config, {}\n        return cfg.max_steps\n"
    )
    assert config_reads(source) == ["a: cfg.seed", "b: getattr(config, 'critic')", "c: cfg.max_steps"]


def test_the_parts_the_loop_and_the_trainer_read_only_the_bundle():
    reads = {path.name: config_reads(path.read_text()) for path in BUNDLE_READERS}
    assert {name: found for name, found in reads.items() if found} == {}


def test_no_component_below_the_loop_takes_a_demonstration_flag():
    """A demonstration step's rollout, experience, loss and rate travel in its phase object: no function of
    the pipeline or the trainer takes a `demonstration*` argument (trainer/demonstration.py is the phase)."""
    flagged = []
    for path in BUNDLE_READERS[1:]:
        if path.name == "demonstration.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [*fn.args.args, *fn.args.kwonlyargs]
                flagged += [
                    f"{path.name}: {fn.name}({a.arg})" for a in args if a.arg.startswith("demonstrat")
                ]
    assert flagged == []


def test_the_bundle_is_frozen_all_the_way_down():
    settings = run_settings(tiny_config(demonstration_steps=2, adv_estimator="gae"))
    nested = [
        settings,
        *(
            v
            for f in dataclasses.fields(settings)
            if dataclasses.is_dataclass(v := getattr(settings, f.name))
        ),
    ]
    assert all(type(d).__dataclass_params__.frozen for d in nested), [type(d).__name__ for d in nested]  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.loop.max_steps = 1  # type: ignore[misc]
    assert isinstance(settings, RunSettings)


def test_the_demonstration_settings_are_sft_at_the_demonstration_rate():
    config = tiny_config(
        demonstration_steps=3,
        demonstration_learning_rate=3e-3,
        use_kl_loss=True,
        actor_train={"training_args": {"learning_rate": 1e-3}},
    )
    settings = run_settings(config)
    loss = settings.demonstration_loss
    assert (loss.policy_loss, loss.kl_loss_coef, loss.entropy_loss_coef, loss.tis_cap) == (
        "sft",
        0.0,
        0.0,
        None,
    )
    assert loss == sft_loss(settings.actor_loss) and settings.actor_loss.policy_loss != "sft"
    rl = update_schedule(config, "actor_train")
    assert settings.actor_schedule == rl and settings.demonstration_schedule.lr_factor == pytest.approx(3.0)
    assert dataclasses.replace(settings.demonstration_schedule, lr_factor=1.0) == rl


class _Rollout:
    """Hands out numbered batches and records when it is stopped."""

    def __init__(self) -> None:
        self.batches, self.stopped_after = 0, None

    async def get_batch(self, size: int) -> tuple[int, int]:
        self.batches += 1
        return self.batches, size

    async def stop(self) -> None:
        self.stopped_after = self.batches


def test_the_demonstration_phase_covers_its_steps_and_stops_its_rollout_after_the_last():
    rollout = _Rollout()
    settings = run_settings(tiny_config(demonstration_steps=2))
    phase = Demonstration(2, rollout, None, settings.demonstration_loss, settings.demonstration_schedule)  # type: ignore[arg-type]
    assert [phase.covers(step) for step in range(4)] == [True, True, False, False]

    async def play() -> list[object]:
        return [await phase.batch(step, 8) for step in range(2)]

    assert asyncio.run(play()) == [(1, 8), (2, 8)]
    assert rollout.stopped_after == 2
