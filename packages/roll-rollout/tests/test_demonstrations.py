"""Demonstrated turns (`SamplingSettings.demonstrate`): the env's own answer replaces the policy's, recorded as a
policy would have sampled it; an env without demonstrations fails its episode with the fix."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
from roll_rollout import EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings, decode_trajectory
from roll_rollout.hosting.worker import encode_jobs
from roll_rollout.policies.policy import GenerateRequest, encode_request
from roll_rollout.testing import CountdownEnv, ScriptedPolicy

MOVES = {3: "Up", 2: "Down", 1: "Left"}


class DemonstratingEnv(CountdownEnv):
    """A countdown whose expert answers a move that names how many steps are left (Up 3, Down 2, Left 1); it
    records what it was told."""

    def __init__(self) -> None:
        super().__init__(min_turns=3, spread=1)
        self.heard: list[str] = []

    def demonstration(self) -> str | None:
        return f"<answer>{MOVES[self.left]}</answer>" if self.left > 0 else None

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.heard.append(action)
        return super().step(action)


class Silent(CountdownEnv):
    def demonstration(self) -> str | None:
        return None


def decoded(tokenizer: Any, ids: list[int]) -> str:
    """The text of `ids` (this word-level tokenizer decodes with a space between words)."""
    return tokenizer.decode(ids, skip_special_tokens=True).replace(" ", "")


def play(
    chat_tokenizer, answer_ids, env, prefix: str = "", demonstrate: bool = True, max_new_tokens: int = 16
):
    policy = ScriptedPolicy(answer_ids)
    slots = [EnvSlotSpec(0, "A", "countdown", max_turns=5, response_prefix=prefix)]
    worker = EnvWorker(slots, chat_tokenizer, policy, env_factory=lambda _t, _c: env)
    sampling = SamplingSettings(max_new_tokens=max_new_tokens, demonstrate=demonstrate)

    async def scenario():
        await worker.submit(encode_jobs([EpisodeJob(0, 0, 1, seed=0, sampling=sampling)]))
        async with asyncio.timeout(10):
            while True:
                done = msgpack.unpackb(await worker.poll(0.05))["done"]
                if done:
                    return decode_trajectory(done[0])

    return asyncio.run(scenario()), policy


def test_demonstrated_turns_are_the_envs_answers_as_response_ids(chat_tokenizer, answer_ids):
    env = DemonstratingEnv()
    traj, policy = play(chat_tokenizer, answer_ids, env)
    assert traj.error is None and traj.success and len(traj.turns) == 3
    assert env.heard == ["<answer>Up</answer>", "<answer>Down</answer>", "<answer>Left</answer>"]
    eos = chat_tokenizer.eos_token_id
    for turn, said in zip(traj.turns, env.heard, strict=True):
        assert turn.response_ids[-1] == eos and turn.log_probs == [0.0] * len(turn.response_ids)
        assert decoded(chat_tokenizer, turn.response_ids) == said
        assert turn.response_text == said
    assert policy.requests == 0  # the policy was never asked


def test_the_response_prefix_stays_in_the_prompt(chat_tokenizer, answer_ids):
    env = DemonstratingEnv()
    traj, _ = play(chat_tokenizer, answer_ids, env, prefix="<answer>")
    assert env.heard[0] == "<answer>Up</answer>"
    first = traj.turns[0]
    assert decoded(chat_tokenizer, first.response_ids) == "Up</answer>"
    prefix_ids = chat_tokenizer.encode("<answer>", add_special_tokens=False)
    assert first.prompt_ids[-len(prefix_ids) :] == prefix_ids


def test_without_demonstrate_the_policy_answers(chat_tokenizer, answer_ids):
    env = DemonstratingEnv()
    traj, policy = play(chat_tokenizer, answer_ids, env, demonstrate=False)
    assert policy.requests == len(traj.turns) > 0 and "<answer>Up</answer>" not in env.heard


def test_an_env_without_a_demonstration_fails_its_episode_with_the_fix(chat_tokenizer, answer_ids):
    traj, _ = play(chat_tokenizer, answer_ids, Silent())
    assert traj.error is not None and "no demonstration" in traj.error and "demonstration_steps" in traj.error
    traj, _ = play(chat_tokenizer, answer_ids, CountdownEnv())  # no demonstration() at all
    assert traj.error is not None and "no demonstration" in traj.error


def test_a_demonstration_outside_the_prefix_or_the_budget_fails_its_episode(chat_tokenizer, answer_ids):
    traj, _ = play(chat_tokenizer, answer_ids, DemonstratingEnv(), prefix="The answer is ")
    assert traj.error is not None and "response prefix" in traj.error
    traj, _ = play(chat_tokenizer, answer_ids, DemonstratingEnv(), max_new_tokens=2)
    assert traj.error is not None and "max_tokens_per_step" in traj.error


def test_a_request_never_carries_demonstrate():
    payload = encode_request(GenerateRequest([1, 2], SamplingSettings(demonstrate=True)))
    assert b"demonstrate" not in payload
