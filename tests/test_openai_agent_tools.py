"""An unmodified agent whose tool acts on its world (examples/openai_agent/frozen_lake_agent.py): each `move` call
steps the episode's task env through `<base_url>/env/step`, the env's steps give the reward, and with
`demonstration_steps` the env's shortest-path moves answer the agent's calls as `move` calls. The reference is
a FrozenLake env played directly, not the proxy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from small_runs import run_to_end, steps

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "openai_agent"
AGENT = f"{EXAMPLE / 'frozen_lake_agent.py'}:run"
LAKE = {"describe": True}


def _tokenizer() -> Any:
    from roll_strategies.models.tiny_tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer(["Left", "Down", "Right", "Up"])


def _play(policy: Any, agent: str = AGENT, demonstrate: bool = False, seed: int = 0) -> Any:
    """One FrozenLake episode of an openai_agent slot playing `agent`."""
    from roll_rollout import EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings
    from roll_rollout.testing import play_jobs

    config = {
        "agent": agent,
        "task_env": "frozen_lake",
        "task_env_config": LAKE,
        "agent_timeout_s": 60,
        "demonstration_tool": {"name": "move", "argument": "direction"},
    }
    spec = EnvSlotSpec(0, "Lake", "openai_agent", config, max_turns=10, max_context_tokens=4096)
    sampling = SamplingSettings(max_new_tokens=96, demonstrate=demonstrate)

    worker = EnvWorker([spec], _tokenizer(), policy)
    return asyncio.run(play_jobs(worker, [EpisodeJob(0, 0, 0, seed, sampling)]))[0]


def _reference(moves: list[str], seed: int = 0) -> tuple[int, float, bool]:
    """(steps until done, summed reward, success) of `moves` played on the env directly."""
    from roll_envs.envs.frozen_lake.env import FrozenLakeEnv

    env = FrozenLakeEnv(LAKE)
    env.reset(seed=seed)
    total = 0.0
    for n, move in enumerate(moves, 1):
        _, reward, terminated, truncated, _ = env.step(env.format_answer(move))
        total += reward
        if terminated or truncated:
            return n, total, env.is_success()
    return len(moves), total, env.is_success()


def test_each_move_call_steps_the_task_env_and_its_steps_give_the_reward() -> None:
    from roll_rollout.testing import ScriptedPolicy

    tokenizer = _tokenizer()
    call = '<tool_call>{"name": "move", "arguments": {"direction": "Left"}}</tool_call>'
    traj = _play(ScriptedPolicy(tokenizer.encode(call, add_special_tokens=False)))
    played, reward, success = _reference(["Left"] * 10)
    assert traj.error is None, traj.error
    assert len(traj.turns) == played and sum(t.reward for t in traj.turns) == reward
    assert traj.success is success


def test_a_reply_without_a_tool_call_ends_the_episode_the_env_unmoved() -> None:
    from roll_rollout.testing import ScriptedPolicy

    traj = _play(ScriptedPolicy(_tokenizer().encode("Left", add_special_tokens=False)))
    assert traj.error is None, traj.error
    assert len(traj.turns) == 1 and traj.turns[0].reward == 0.0 and not traj.success


def test_a_demonstrated_episode_answers_each_call_with_the_shortest_path_move() -> None:
    from roll_envs.envs.frozen_lake.env import FrozenLakeEnv
    from roll_envs.envs.frozen_lake.rules import shortest_path_moves
    from roll_rollout.testing import ScriptedPolicy

    env = FrozenLakeEnv(LAKE)
    env.reset(seed=0)
    path = shortest_path_moves(env.desc, env.position)
    tokenizer = _tokenizer()
    traj = _play(ScriptedPolicy([]), demonstrate=True)  # the policy is never asked
    assert traj.error is None, traj.error
    assert traj.success and [t.reward for t in traj.turns][-1] == 1.0
    blocks = [json.dumps({"name": "move", "arguments": {"direction": m}}) for m in path]
    expected = [
        [*tokenizer.encode(f"<tool_call>{b}</tool_call>", add_special_tokens=False), tokenizer.eos_token_id]
        for b in blocks
    ]
    assert [t.response_ids for t in traj.turns] == expected
    assert all(lp == 0.0 for t in traj.turns for lp in t.log_probs)


def test_an_agent_that_steps_the_env_gets_400_after_done_and_must_return_none(tmp_path: Path) -> None:
    from roll_rollout.testing import ScriptedPolicy

    agent = tmp_path / "stepping_agent.py"
    agent.write_text(
        "import json, urllib.error, urllib.request\n"
        "from openai import OpenAI\n"
        "def post(url, body):\n"
        "    req = urllib.request.Request(url, json.dumps(body).encode(), {'Content-Type': 'application/json'})\n"
        "    return json.loads(urllib.request.urlopen(req).read())\n"
        "def run(base_url, task):\n"
        "    OpenAI(base_url=base_url, api_key='x').chat.completions.create(model='m', messages=[\n"
        "        {'role': 'user', 'content': task['prompt']}])\n"
        "    while not post(task['step_url'], {'action': 'Left'})['done']:\n"
        "        pass\n"
        "    try:\n"
        "        post(task['step_url'], {'action': 'Left'})\n"
        "    except urllib.error.HTTPError as exc:\n"
        "        return f'{exc.code} ' + json.loads(exc.read())['error']['message']\n"
    )
    traj = _play(ScriptedPolicy([5]), agent=f"{agent}:run")
    assert traj.error is not None and traj.error.startswith("env_error")
    assert "400 the episode is over" in traj.error and "returns None" in traj.error


def test_the_frozen_lake_agent_trains_two_steps_cloned_then_rl_with_the_tiny_model(tmp_path: Path) -> None:
    """The example config as it is, shrunk: one cloning step, one GRPO step, held-out validation."""
    from roll_pipeline.observe.plotting import read_metrics
    from roll_pipeline.preflight import compose

    overrides = [
        *steps(2),
        "demonstration_steps=1",
        "cluster.backend=local",
        f"output_dir={tmp_path}",
        "train_env_manager.num_env_groups=1",
        "train_env_manager.group_size=4",
        "val_env_manager.num_env_groups=2",
        f"custom_envs.Lake.env_config.agent={AGENT}",
    ]
    config = compose(str(EXAMPLE), "agent_frozen_lake", overrides, preflight=True)
    summary = run_to_end(config)
    rows = read_metrics(summary.run_dir)
    trained = {r["step"]: r for r in rows if "critic/score/mean" in r}
    assert sorted(trained) == [1, 2]
    assert trained[1]["critic/score/mean"] == 1.0  # every cloned episode reaches the goal
    assert all(r.get("val/failed_episodes", 0) == 0 == r.get("rollout/failed_episodes", 0) for r in rows)
