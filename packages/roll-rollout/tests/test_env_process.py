"""Undeclared envs in child processes of their own (`roll_rollout.hosting.env_process`): a hung call holds up only its
own slot, a timed-out or cancelled call kills its child, and one seed still gives one episode."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgpack
import pytest
import roll_envs
from roll_rollout import EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings, decode_trajectory
from roll_rollout.hosting.env_process import EnvProcessError, EnvRecipe, EnvRecipeError
from roll_rollout.hosting.worker import EnvCallLimits, encode_jobs
from roll_rollout.testing import ScriptedPolicy

roll_envs.register("roll_test_global_draws", "roll_rollout.testing:GlobalDrawsEnv")
roll_envs.register("roll_test_preload_probe", "roll_rollout.testing:PreloadProbeEnv")
SAMPLING = SamplingSettings(max_new_tokens=4)


def worker_of(chat_tokenizer, answer_ids, configs: list[dict[str, Any]], **limits: Any) -> EnvWorker:
    """One slot per config of `roll_test_global_draws`, built from the registry (the default factory)."""
    slots = [EnvSlotSpec(e, "A", "roll_test_global_draws", c, max_turns=3) for e, c in enumerate(configs)]
    settings = {"max_env_step_concurrent": len(configs), "env_step_timeout_s": 120.0, **limits}
    return EnvWorker(slots, chat_tokenizer, ScriptedPolicy(answer_ids), limits=EnvCallLimits(**settings))


async def collect(worker: EnvWorker, until: int) -> tuple[list[Any], list[int], dict[str, Any]]:
    """Poll until `until` episodes are done or cancelled: (trajectories, cancelled ids, last stats)."""
    done: list[Any] = []
    cancelled: list[int] = []
    async with asyncio.timeout(90):
        while len(done) + len(cancelled) < until:
            reply = msgpack.unpackb(await worker.poll(0.05))
            done += [decode_trajectory(p) for p in reply["done"]]
            cancelled += reply["cancelled"]
    return done, cancelled, reply["stats"]


def test_a_hung_env_holds_up_only_its_own_slot_and_cancelling_it_kills_its_process(
    chat_tokenizer, answer_ids
):
    """Slot 0's first step sleeps an hour (its timeout: 120 s); the three other undeclared envs play their
    episodes to the end meanwhile. In-process they would wait behind the hung call's lock for 120 s."""
    worker = worker_of(chat_tokenizer, answer_ids, [{"hang_s": 3600.0}, {}, {}, {}])
    process = worker._slots[0].manager.process
    assert process is not None and all(s.manager.process is not None for s in worker._slots.values())
    jobs = [EpisodeJob(e, e, 100 + e, 7, SAMPLING) for e in range(4)]

    async def scenario() -> tuple[list[Any], list[int], dict[str, Any], int | None]:
        await worker.submit(encode_jobs(jobs))
        healthy, _, _ = await collect(worker, 3)
        hung_pid = process.pid
        await worker.cancel(msgpack.packb([100]))
        _, cancelled, stats = await collect(worker, 1)
        for _ in range(200):  # the killed child's socket closes: the blocked thread returns
            if worker.calls.hung == 0:
                break
            await asyncio.sleep(0.01)
        worker.close()
        return healthy, cancelled, {**stats, "hung_after": worker.calls.hung}, hung_pid

    healthy, cancelled, stats, hung_pid = asyncio.run(scenario())
    assert sorted(t.env_id for t in healthy) == [1, 2, 3]  # done while slot 0 was inside its step
    assert all(t.error is None and len(t.turns) == 3 for t in healthy)
    assert hung_pid is not None and cancelled == [100]
    assert process.pid is None and stats["hung_after"] == 0  # killed: no thread stays in the env


def test_a_timed_out_call_kills_the_child_and_the_next_episode_starts_another(chat_tokenizer, answer_ids):
    worker = worker_of(chat_tokenizer, answer_ids, [{"hang_s": 3600.0}], env_step_timeout_s=1.0)
    process = worker._slots[0].manager.process
    assert process is not None
    jobs = [EpisodeJob(0, 0, 100 + i, 7, SAMPLING) for i in range(2)]

    async def scenario() -> list[Any]:
        await worker.submit(encode_jobs(jobs))
        done, _, _ = await collect(worker, 2)
        for _ in range(200):
            if worker.calls.hung == 0:
                break
            await asyncio.sleep(0.01)
        worker.close()
        return done

    done = asyncio.run(scenario())
    assert [t.error.split(":", 1)[0] for t in done] == ["env_timeout", "env_timeout"]
    assert process.started == 2 and worker.calls.hung == 0 and not worker.calls.needs_recycle


def play(chat_tokenizer, answer_ids, seeds: list[int], env_processes: bool) -> list[list[Any]]:
    """Each slot plays one episode of its seed; (state key, reward) per turn, by slot."""
    worker = worker_of(chat_tokenizer, answer_ids, [{} for _ in seeds], env_processes=env_processes)
    assert all((s.manager.process is not None) == env_processes for s in worker._slots.values())
    jobs = [EpisodeJob(e, 0, 100 + e, seed, SAMPLING) for e, seed in enumerate(seeds)]

    async def scenario() -> list[Any]:
        await worker.submit(encode_jobs(jobs))
        done, _, _ = await collect(worker, len(jobs))
        worker.close()
        return sorted(done, key=lambda t: t.env_id)

    trajs = asyncio.run(scenario())
    assert all(t.error is None for t in trajs), [t.error for t in trajs]
    return [[(turn.state_key, turn.reward) for turn in t.turns] for t in trajs]


def test_one_seed_gives_the_episode_it_gives_in_process(chat_tokenizer, answer_ids):
    in_children = play(chat_tokenizer, answer_ids, [7, 7, 8], env_processes=True)
    assert in_children[0] == in_children[1] != in_children[2]
    assert in_children == play(chat_tokenizer, answer_ids, [7, 7, 8], env_processes=False)


def test_an_env_defined_in_main_cannot_cross_and_the_error_says_what_to_do():
    class Local:
        pass

    roll_envs.register("roll_test_local_env", Local)
    with pytest.raises(EnvRecipeError, match="env_processes=False"):
        EnvRecipe.of("roll_test_local_env", {})


def test_a_demonstration_crosses_from_the_child_as_the_in_process_env_gives_it():
    from roll_envs.random_state import IsolatedEnv
    from roll_rollout.hosting.env_process import EnvProcess

    process = EnvProcess(EnvRecipe.of("roll_test_global_draws", {}))
    local = IsolatedEnv.make(roll_envs.make, "roll_test_global_draws")
    env = process.make()
    try:
        for seed in (1, 2):
            assert env.reset(seed=seed) == local.reset(seed=seed)
            assert env.demonstration() == local.demonstration() == f"total {local.env.total}"
    finally:
        process.close()


def test_an_env_error_in_the_child_keeps_its_type_and_message():
    from roll_rollout.hosting.env_process import EnvProcess

    process = EnvProcess(EnvRecipe.of("roll_test_global_draws", {}))
    env = process.make()
    try:
        with pytest.raises(EnvProcessError, match=r"ValueError: a random state is seeded with an int >= 0"):
            env.reset(seed=-1)
        assert env.reset(seed=1)[0].startswith("total ")  # the child lives on
    finally:
        process.close()


def test_the_env_process_is_forked_after_the_env_s_modules_are_imported(monkeypatch):
    """The zygote imports the env's module and the libraries it declares (`process_preload`) before forking
    its process, so that every slot shares them (reasoning-gym: about 100 MB a process otherwise)."""
    from roll_rollout.hosting.env_process import EnvProcess, _Zygote

    recipe = EnvRecipe.of("roll_test_preload_probe", {})
    assert recipe.preload == ("roll_rollout.testing", "colorsys")
    for preload, loaded in (((), False), (recipe.preload, True)):
        monkeypatch.setattr(_Zygote, "_shared", None)  # a fresh zygote: none has imported colorsys
        process = EnvProcess(dataclasses.replace(recipe, preload=preload))
        try:
            env = process.make()
            assert env.instruction == f"colorsys loaded before the env: {loaded}"
            assert env.reset(seed=3)[0].startswith("total ")
        finally:
            process.close()
