"""tools/policy_rules.py: the scripted FrozenLake rules on hand-built boards, and its report on a dump."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))
import policy_rules  # noqa: E402


@pytest.mark.parametrize(
    ("board", "vertical", "horizontal", "sidestep"),
    [
        (["P___", "____", "___G", "____"], "Down", "Right", "Down"),
        (["P___", "O___", "___G", "____"], "Down", "Right", "Right"),  # the hole below: sidestep
        (["___G", "____", "O___", "P___"], "Up", "Right", "Right"),
        (["G__P", "____", "____", "____"], "Left", "Left", "Left"),  # same row: no vertical move
        (["G_OP", "____", "____", "____"], "Left", "Left", "Left"),  # same row: no sidestep to take
    ],
)
def test_rules_on_hand_built_boards(board: list[str], vertical: str, horizontal: str, sidestep: str) -> None:
    assert policy_rules.vertical(board) == vertical
    assert policy_rules.horizontal(board) == horizontal
    assert policy_rules.vertical_sidestep(board) == sidestep


def test_rule_success_on_a_given_map_matches_a_hand_count() -> None:
    # roll_envs' FrozenLake on seed s: replay the rule by hand on each map, with its own move function.
    import roll_envs
    from roll_envs.envs.frozen_lake import move

    seeds = list(range(40))
    env = roll_envs.make("frozen_lake")
    by_hand = 0
    for seed in seeds:
        env.reset(seed=seed)
        desc, cols = env.desc, len(env.desc[0])
        position = "".join(desc).index("S")
        goal = "".join(desc).index("G")
        for _ in range(8):
            (r, c), (gr, gc) = divmod(position, cols), divmod(goal, cols)
            action = 1 if gr > r else 3 if gr < r else 2 if gc > c else 0
            position = move(desc, position, action)
            if "".join(desc)[position] in "GH":
                break
        by_hand += position == goal
    assert policy_rules.rule_success(policy_rules.vertical, seeds, 8) == by_hand / len(seeds)


def test_report_on_a_dump(tmp_path: Path) -> None:
    turns = [
        {"observation": "P___\nO___\n___G\n____", "response": "<answer>Down</answer>"},  # into the hole
        {"observation": "X___\nO___\n___G\n____", "response": "<answer>Down</answer>"},  # no P: not counted
    ]
    episode = {"tag": "FrozenLake", "seed": 7, "success": False, "turns": turns}
    (tmp_path / "transcripts.jsonl").write_text(json.dumps(episode) + "\n")
    out = subprocess.run(
        [sys.executable, str(TOOLS / "policy_rules.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "1 episodes, success 0.000, 1 moves" in out
    assert "| vertical | 1/1 (1.00) |" in out and "| vertical+sidestep | 0/1 (0.00) |" in out
    assert (
        "moves into a hole: 1; boards where `vertical` walks into a hole: 1, the policy avoided it on 0"
        in out
    )
