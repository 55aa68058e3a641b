"""`EnvWorker`'s protocol: submit, cancel and poll; every job ends done or cancelled, exactly once."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from roll_rollout import EnvSlotSpec, EnvWorker, EpisodeJob, PayloadError, SamplingSettings, decode_trajectory
from roll_rollout.hosting.worker import encode_jobs
from roll_rollout.testing import CountdownEnv, ScriptedPolicy, countdown_factory

SAMPLING = SamplingSettings(max_new_tokens=4)


def job(env_id, episode_id, seed=0):
    return EpisodeJob(env_id, group_id=0, episode_id=episode_id, seed=seed, sampling=SAMPLING)


async def drain(worker, expected, timeout=10.0):
    """Poll until `expected` jobs are done or cancelled; returns (done trajectories, cancelled ids)."""
    done, cancelled = [], []
    async with asyncio.timeout(timeout):
        while len(done) + len(cancelled) < expected:
            msg = msgpack.unpackb(await worker.poll(0.05))
            done += [decode_trajectory(p) for p in msg["done"]]
            cancelled += msg["cancelled"]
    return done, cancelled


def make_worker(chat_tokenizer, answer_ids, num_slots=2, latency=0.0, env_factory=None):
    slots = [EnvSlotSpec(e, "A", "countdown", max_turns=5) for e in range(num_slots)]
    policy = ScriptedPolicy(answer_ids, latency=(lambda r: latency) if latency else None)
    return EnvWorker(slots, chat_tokenizer, policy, env_factory=env_factory or countdown_factory(min_turns=2))


def test_a_slot_plays_its_queued_jobs_in_order(chat_tokenizer, answer_ids):
    worker = make_worker(chat_tokenizer, answer_ids)

    async def scenario():
        await worker.submit(encode_jobs([job(0, 10, seed=1), job(0, 11, seed=2), job(1, 12)]))
        return await drain(worker, 3)

    done, cancelled = asyncio.run(scenario())
    assert cancelled == []
    slot0 = [t.episode_id for t in done if t.env_id == 0]
    assert slot0 == [10, 11] and {t.episode_id for t in done} == {10, 11, 12}
    assert [len(t.turns) for t in done if t.env_id == 0] == [2 + 1 % 3, 2 + 2 % 3]


def test_cancel_stops_running_and_queued_jobs_and_is_acknowledged_once(chat_tokenizer, answer_ids):
    worker = make_worker(chat_tokenizer, answer_ids, latency=0.05)

    async def scenario():
        await worker.submit(encode_jobs([job(0, 1), job(0, 2), job(1, 3)]))
        await asyncio.sleep(0.02)  # job 1 running, job 2 queued
        await worker.cancel(msgpack.packb([1, 2, 99]))  # 99 is unknown: ignored
        return await drain(worker, 3)

    done, cancelled = asyncio.run(scenario())
    assert sorted(cancelled) == [1, 2]
    assert [t.episode_id for t in done] == [3]


def test_cancelling_a_finished_job_changes_nothing(chat_tokenizer, answer_ids):
    worker = make_worker(chat_tokenizer, answer_ids)

    async def scenario():
        await worker.submit(encode_jobs([job(0, 1)]))
        done, _ = await drain(worker, 1)
        await worker.cancel(msgpack.packb([1]))
        msg = msgpack.unpackb(await worker.poll(0.05))
        return done, msg

    done, msg = asyncio.run(scenario())
    assert [t.episode_id for t in done] == [1] and msg["cancelled"] == [] and msg["done"] == []
    assert "cancelled_episodes" not in msg["stats"]  # nothing was cancelled


def test_an_env_cancelled_mid_step_is_replaced_by_a_fresh_one(chat_tokenizer, answer_ids):
    made = []

    def factory(_type, _config):
        made.append(CountdownEnv(min_turns=3, step_s=0.2))
        return made[-1]

    worker = make_worker(chat_tokenizer, answer_ids, num_slots=1, env_factory=factory)

    async def scenario():
        await worker.submit(encode_jobs([job(0, 1)]))
        await asyncio.sleep(0.1)  # inside the first env.step (0.2 s)
        await worker.cancel(msgpack.packb([1]))
        await worker.submit(encode_jobs([job(0, 2)]))
        return await drain(worker, 2)

    done, cancelled = asyncio.run(scenario())
    assert cancelled == [1] and [t.episode_id for t in done] == [2]
    assert len(made) == 2  # the env that was mid-step was never reused


def test_bad_payloads_are_rejected_with_a_clear_error(chat_tokenizer, answer_ids):
    worker = make_worker(chat_tokenizer, answer_ids)
    with pytest.raises(PayloadError, match=r"env ids \[7\] are not hosted"):
        asyncio.run(worker.submit(encode_jobs([job(7, 1)])))
    with pytest.raises(PayloadError, match="episode jobs payload is malformed"):
        asyncio.run(worker.submit(b"\xc1garbage"))
    with pytest.raises(PayloadError, match="list of int episode ids"):
        asyncio.run(worker.cancel(msgpack.packb(["1"])))


@pytest.mark.parametrize(
    ("bad_step", "message"),
    [
        ((1, float("nan"), {}), "non-finite reward"),
        ((1, "high", {}), "reward of type str"),
        ((1, 0.0, {"metrics": {"score": float("inf")}}), "metric 'score' is inf"),
        ((None, 0.0, {}), "observation of type NoneType"),
    ],
)
def test_an_env_step_the_trajectory_cannot_carry_fails_only_its_episode(
    chat_tokenizer, answer_ids, bad_step, message
):
    obs_is_str, reward, info = bad_step

    class BadEnv(CountdownEnv):
        def step(self, action):
            _obs, _, terminated, truncated, _ = super().step(action)
            return ("x" if obs_is_str else None), reward, terminated, truncated, info

    worker = make_worker(chat_tokenizer, answer_ids, num_slots=1, env_factory=lambda t, c: BadEnv())

    async def scenario():
        await worker.submit(encode_jobs([job(0, 1)]))
        return await drain(worker, 1)

    (traj,), _ = asyncio.run(scenario())
    assert traj.error.startswith("env_error: ") and message in traj.error


def test_the_env_reads_the_response_prefix_followed_by_the_sampled_text(chat_tokenizer):
    """The policy samples 'Left</answer>' only; with response_prefix '<answer>' the env gets a valid answer,
    the prefix is the last prompt id, and the trained ids are exactly the sampled ones."""
    sampled = chat_tokenizer.encode("Left</answer>", add_special_tokens=False)
    seen: list[str] = []

    def factory(_type, _config):
        env = CountdownEnv(min_turns=1)
        step = env.step

        def recording_step(action):
            seen.append(action)
            return step(action)

        env.step = recording_step
        return env

    slots = [EnvSlotSpec(0, "A", "countdown", max_turns=1, response_prefix="<answer>")]
    worker = EnvWorker(slots, chat_tokenizer, ScriptedPolicy(sampled), env_factory=factory)

    async def scenario():
        await worker.submit(encode_jobs([job(0, 1)]))
        return await drain(worker, 1)

    (traj,), _ = asyncio.run(scenario())
    read = "<answer>" + chat_tokenizer.decode(sampled, skip_special_tokens=True)
    assert (
        read.replace(" ", "") == "<answer>Left</answer>"
    )  # this word-level test tokenizer decodes with spaces
    assert seen == [read]
    turn = traj.turns[0]
    assert turn.response_ids == sampled and turn.response_text == read
    assert turn.prompt_ids[-1] == chat_tokenizer.convert_tokens_to_ids("<answer>")


def test_turns_record_whether_the_env_read_refused_or_could_not_read_the_answer(chat_tokenizer, answer_ids):
    """The env's `action_is_valid` / `action_is_refused` reach each turn and the episode's rates; an env that
    never says `action_is_refused` (CountdownEnv) refuses nothing."""
    schedule = [(True, False), (True, True), (False, False), (True, True), (True, False)]  # (valid, refused)

    class JudgingEnv(CountdownEnv):
        def step(self, action):
            turn = 5 - self.left
            obs, reward, terminated, truncated, info = super().step(action)
            valid, refused = schedule[turn]
            flags = {"action_is_valid": valid, "action_is_refused": refused}
            return obs, reward, terminated, truncated, {**info, **flags}

    worker = make_worker(
        chat_tokenizer, answer_ids, num_slots=1, env_factory=lambda t, c: JudgingEnv(min_turns=5)
    )
    plain = make_worker(chat_tokenizer, answer_ids, num_slots=1)

    async def scenario(w):
        await w.submit(encode_jobs([job(0, 1, seed=0)]))
        return await drain(w, 1)

    (traj,), _ = asyncio.run(scenario(worker))
    assert [(t.action_is_valid, t.action_is_refused) for t in traj.turns] == schedule
    assert traj.metrics["action_is_valid"] == 4 / 5 and traj.metrics["action_is_refused"] == 2 / 5
    (other,), _ = asyncio.run(scenario(plain))
    assert other.turns and not any(t.action_is_refused for t in other.turns)
    assert other.metrics["action_is_refused"] == 0.0
