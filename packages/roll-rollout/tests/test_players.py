"""Multi-player games through the env manager, worker and scheduler: seats played by the policy or a
fixed policy, each seat's prompt its own, rewards credited PettingZoo-style, one trajectory per seat.

The reference for every episode is a replay of its moves on a fresh TicTacToe env, crediting each
reward of `info["rewards"]` to that seat's latest move by hand."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
import roll_envs
import roll_envs.envs.tictactoe
from roll_rollout import (
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    EpisodeJob,
    GenerateResult,
    SamplingSettings,
    SeatsError,
    split_players,
)
from roll_rollout.hosting.worker import EnvCallLimits
from roll_rollout.testing import play_jobs


class CellPolicy:
    """Answers `<answer>N</answer>` with a cell N drawn from the request's own key (taken cells too), or with
    `by_prompt` from its prompt (one prompt, one answer, in any slot)."""

    def __init__(self, tokenizer, by_prompt: bool = False) -> None:
        self.tokenizer = tokenizer
        self.by_prompt = by_prompt

    async def generate(self, request) -> GenerateResult:
        key = str(request.prompt_ids) if self.by_prompt else request.sample_key
        cell = random.Random(key).randint(1, 9)
        ids = self.tokenizer.encode(f"<answer>{cell}</answer>", add_special_tokens=False)
        return GenerateResult(ids, [-0.25] * len(ids), "stop", 0)


@pytest.fixture(scope="module")
def digit_tokenizer(make_word_tokenizer):
    """A word-level tokenizer that reads the TicTacToe board and answers (digits, marks, tags)."""
    board = [*"123456789|XO.\n", "You", "play", "Your", "move", "won", "Draw"]
    return make_word_tokenizer([*board, "system", "user", "assistant"])


def make_env(_type, config):
    return roll_envs.make("tictactoe", **config)


def play(tokenizer, seeds, fixed_players=None, max_turns=30, env_config=None, by_prompt=False):
    slots = [
        EnvSlotSpec(
            e,
            "ttt",
            "tictactoe",
            dict(env_config or {}),
            max_turns=max_turns,
            max_history_turns=None,
            fixed_players=dict(fixed_players or {}),
        )
        for e in range(len(seeds))
    ]
    policy = CellPolicy(tokenizer, by_prompt)
    worker = EnvWorker(slots, tokenizer, policy, env_factory=make_env, limits=EnvCallLimits())
    sampling = SamplingSettings(max_new_tokens=8)
    jobs = [EpisodeJob(e, 0, 100 + e, seed, sampling) for e, seed in enumerate(seeds)]

    trajs = asyncio.run(play_jobs(worker, jobs))
    assert all(t.error is None for t in trajs), [t.error for t in trajs]
    return trajs


def replay_rewards(seed, moves, env_config=None):
    """Replay (seat, text) moves on a fresh env; each seat's reward per own move, credited by hand."""
    env = roll_envs.make("tictactoe", **(env_config or {}))
    env.reset(seed=seed)
    per_move: dict[str, list[float]] = {"X": [], "O": []}
    for seat, text in moves:
        assert env.current_player == seat
        info = env.step(text)[4]
        per_move[seat].append(0.0)
        for who, reward in info["rewards"].items():
            if per_move[who]:
                per_move[who][-1] += reward
    return per_move, info


def test_self_play_records_both_seats_and_credits_the_loser_on_its_last_move(digit_tokenizer):
    long_games = {"max_steps": 80}
    for traj in play(digit_tokenizer, [0, 1, 2, 3], max_turns=80, env_config=long_games):
        moves = [(t.player, t.response_text) for t in traj.turns]
        assert {p for p, _ in moves} == {"X", "O"} and moves[0][0] == "X"
        expected, info = replay_rewards(traj.seed, moves, long_games)
        for seat in ("X", "O"):
            got = [t.reward for t in traj.turns if t.player == seat]
            assert got == pytest.approx(expected[seat])
        assert traj.player_success == info["player_success"] and traj.terminated


def test_each_seats_prompt_holds_its_own_observations_only(digit_tokenizer):
    (traj,) = play(digit_tokenizer, [5])
    for seat in ("X", "O"):
        turns = [t for t in traj.turns if t.player == seat]
        assert all(f"You play {seat}" in t.observation or "won" in t.observation for t in turns)
        for prev, nxt in itertools.pairwise(turns):  # the seat's conversation chains
            head = prev.prompt_ids + prev.response_ids
            assert nxt.prompt_ids[: len(head)] == head
        other = "O" if seat == "X" else "X"
        prompt = digit_tokenizer.decode(turns[-1].prompt_ids)
        assert f"You play {other}" not in prompt


def test_a_fixed_seat_is_played_by_the_envs_policy_and_not_recorded(digit_tokenizer):
    trajs = play(digit_tokenizer, [0, 1, 2, 3, 4, 5], fixed_players={"O": "random"})
    for traj in trajs:
        assert {t.player for t in traj.turns} == {"X"} and set(traj.player_success) == {"X"}
        # the reference: the same game replayed, O answering with the env's random policy on the seed
        env = roll_envs.make("tictactoe")
        env.reset(seed=traj.seed)
        x_turns, x_rewards, done = iter(traj.turns), [], False
        while not done:
            if env.current_player == "X":
                turn = next(x_turns)
                assert turn.observation == env.text_observation()
                _, _, terminated, truncated, info = env.step(turn.response_text)
                x_rewards.append(info["rewards"]["X"])
            else:
                _, _, terminated, truncated, info = env.step(env.fixed_policy_answer("random"))
                x_rewards[-1] += info["rewards"]["X"]
            done = terminated or truncated
        assert next(x_turns, None) is None
        assert [t.reward for t in traj.turns] == pytest.approx(x_rewards)
        assert traj.success == traj.player_success["X"] == info["player_success"]["X"]


def test_one_seed_plays_one_game_against_the_fixed_policy_in_every_slot(digit_tokenizer):
    config = {"opening_moves": 2}
    trajs = play(digit_tokenizer, [9] * 4, fixed_players={"O": "random"}, env_config=config, by_prompt=True)
    games = {tuple((t.observation, t.response_text) for t in traj.turns) for traj in trajs}
    assert len(games) == 1 and len(trajs[0].turns) > 2
    other = play(digit_tokenizer, [10], fixed_players={"O": "random"}, env_config=config, by_prompt=True)
    assert tuple((t.observation, t.response_text) for t in other[0].turns) not in games


def test_split_players_gives_each_seat_its_turns_success_and_score(digit_tokenizer):
    (traj,) = play(digit_tokenizer, [3])
    parts = split_players(traj)
    assert [p.player for p in parts] == ["X", "O"]
    for part in parts:
        assert all(t.player == part.player for t in part.turns)
        assert part.success == traj.player_success[part.player]
        assert part.metrics["score"] == pytest.approx(part.score)
        assert part.metrics["num_actions"] == len(part.turns)
    assert sum(len(p.turns) for p in parts) == len(traj.turns)


def test_the_turn_cap_counts_every_seats_moves(digit_tokenizer):
    (traj,) = play(digit_tokenizer, [0], max_turns=3)
    assert len(traj.turns) <= 3 and traj.truncated


@pytest.mark.parametrize(
    ("fixed", "message"),
    [
        ({"Z": "random"}, r"names seat 'Z'; env TicTacToeEnv has \['X', 'O'\]"),
        (
            {"O": "champion"},
            r"gives seat 'O' to 'champion'; .* offers the fixed policies \['random', 'minimax'\]",
        ),
        ({"X": "random", "O": "minimax"}, r"every seat .* leave at least one"),
    ],
)
def test_fixed_players_that_do_not_fit_the_env_are_refused_at_start(digit_tokenizer, fixed, message):
    with pytest.raises(SeatsError, match=message):
        EnvWorker(
            [EnvSlotSpec(0, "ttt", "tictactoe", fixed_players=fixed)],
            digit_tokenizer,
            CellPolicy(digit_tokenizer),
            env_factory=make_env,
        )


def test_fixed_players_on_a_single_agent_env_are_refused(digit_tokenizer):
    with pytest.raises(SeatsError, match="has one player"):
        EnvWorker(
            [EnvSlotSpec(0, "fl", "frozen_lake", fixed_players={"O": "random"})],
            digit_tokenizer,
            CellPolicy(digit_tokenizer),
            env_factory=lambda _t, c: roll_envs.make("frozen_lake", **c),
        )


def test_a_batch_of_self_play_groups_gives_each_seat_a_group_of_its_own(digit_tokenizer):
    from roll_rollout import RolloutScheduler, WorkerLink

    layout = EnvLayout(2, 3, ("ttt",), (2,), 6)

    def spawn(w):
        slots = [
            EnvSlotSpec(e, "ttt", "tictactoe", max_turns=30, max_history_turns=None)
            for e in layout.env_ids_of_worker(w)
        ]
        return WorkerLink.in_process(
            EnvWorker(slots, digit_tokenizer, CellPolicy(digit_tokenizer), env_factory=make_env)
        )

    scheduler = RolloutScheduler(layout, spawn, {"ttt": SamplingSettings(max_new_tokens=8)})

    async def scenario():
        try:
            return await scheduler.get_batch(6)
        finally:
            await scheduler.stop()

    batch = asyncio.run(scenario())
    assert len(batch.trajectories) == 12  # 6 episodes, 2 seats each
    groups: dict[int, set[str]] = {}
    for t in batch.trajectories:
        groups.setdefault(t.group_id, set()).add(t.player)
    assert len(groups) == 4 and all(len(seats) == 1 for seats in groups.values())
    assert sorted(sum(t.group_id == g for t in batch.trajectories) for g in groups) == [3, 3, 3, 3]


class LostTurnEnv(roll_envs.envs.tictactoe.TicTacToeEnv):
    """Names a seat that does not exist as the next player."""

    def _players_info(self, mover, rewards):
        return {**super()._players_info(mover, rewards), "next_player": "Z"}


def test_an_env_that_names_an_unknown_next_player_fails_the_episode_as_an_env_error(digit_tokenizer):
    from roll_rollout import EnvCalls, TrajEnvManager, failure_kind
    from roll_rollout.prompts import PromptBuilder

    manager = TrajEnvManager(
        LostTurnEnv, "ttt", PromptBuilder(digit_tokenizer, None, None), 10, 512, EnvCalls(1, 30.0)
    )
    job = EpisodeJob(0, 0, 0, 0, SamplingSettings(max_new_tokens=8))
    traj = asyncio.run(manager.run_episode(job, CellPolicy(digit_tokenizer)))
    manager.close()
    assert failure_kind(traj) == "env_error" and "next_player 'Z'" in traj.error
