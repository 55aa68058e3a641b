"""Which scripted FrozenLake rule does a policy play? Compares a dump's moves with hand-written rules.

Reads the `transcripts.jsonl` of `roll rollout --dump DIR` (greedy validation episodes) and prints, for
each rule, the share of the policy's moves that equal the rule's move on the same board and the rule's
own success on the same maps (played in `roll_envs`' FrozenLake with the same seeds and turn limit), and
how often the policy walks into a hole next to it. The rules never look further than the next cell:

- `vertical`: toward the goal's row first, then toward its column (what the tiny model learns first);
- `horizontal`: toward the goal's column first, then its row;
- `vertical+sidestep`: `vertical`, but when its next cell is a hole and the goal is also sideways, step
  sideways toward the goal instead (the skill that separates ~0.77 from ~0.93 on the validation maps).

    uv run roll rollout --checkpoint runs/my_run --dump /tmp/dump
    uv run python tools/policy_rules.py /tmp/dump
Findings: docs/tiny_model_findings.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import roll_envs
from roll_envs.envs.frozen_lake import ACTIONS, frozen_lake_neighbours

Rule = Callable[[list[str]], str]


def _find(rows: list[str], marks: str) -> tuple[int, int] | None:
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch in marks:
                return r, c
    return None


def _toward(rows: list[str]) -> tuple[str | None, str | None]:
    """(vertical move toward the goal or None, horizontal move toward the goal or None)."""
    me, goal = _find(rows, "P"), _find(rows, "G")
    assert me is not None and goal is not None, f"no P or G on the board {rows}"
    vertical = "Down" if goal[0] > me[0] else "Up" if goal[0] < me[0] else None
    horizontal = "Right" if goal[1] > me[1] else "Left" if goal[1] < me[1] else None
    return vertical, horizontal


def _is_hole(rows: list[str], move: str) -> bool:
    """Whether `move` walks into a hole (the cells next to P as the sighted model's warm-up names them)."""
    named = frozen_lake_neighbours("\n".join(rows))
    assert named is not None, f"no P on the board {rows}"
    words = named.split()
    return dict(zip(words[::2], words[1::2], strict=True))[move] == "O"


def vertical(rows: list[str]) -> str:
    down_up, left_right = _toward(rows)
    return down_up or left_right or "Left"


def horizontal(rows: list[str]) -> str:
    down_up, left_right = _toward(rows)
    return left_right or down_up or "Left"


def vertical_sidestep(rows: list[str]) -> str:
    down_up, left_right = _toward(rows)
    first = down_up or left_right or "Left"
    if down_up and left_right and _is_hole(rows, first):
        return left_right
    return first


RULES: dict[str, Rule] = {
    "vertical": vertical,
    "horizontal": horizontal,
    "vertical+sidestep": vertical_sidestep,
}


def rule_success(rule: Rule, seeds: list[int], turns: int) -> float:
    env = roll_envs.make("frozen_lake")
    wins = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        for _ in range(turns):
            obs, _, terminated, truncated, _ = env.step(f"<answer>{rule(obs.splitlines())}</answer>")
            if terminated or truncated:
                break
        wins += env.is_success()
    return wins / len(seeds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dump", type=Path, help="a `roll rollout --dump` folder")
    parser.add_argument("--turns", type=int, default=8, help="the env's turn limit (max_actions_per_traj)")
    args = parser.parse_args()
    episodes = [json.loads(line) for line in (args.dump / "transcripts.jsonl").open()]
    episodes = [e for e in episodes if e["tag"] == "FrozenLake"]
    moves: list[tuple[list[str], str]] = []
    for episode in episodes:
        for turn in episode["turns"]:
            rows = turn["observation"].splitlines()
            move = turn["response"].removeprefix("<answer>").removesuffix("</answer>")
            if _find(rows, "P") is not None and move in ACTIONS:
                moves.append((rows, move))
    seeds = [e["seed"] for e in episodes]
    success = sum(e["success"] for e in episodes) / len(episodes)
    print(f"{len(episodes)} episodes, success {success:.3f}, {len(moves)} moves on a board with P")
    print("| rule | moves equal to the policy's | the rule's success on these maps |")
    print("|---|---|---|")
    for name, rule in RULES.items():
        same = sum(rule(rows) == move for rows, move in moves)
        print(
            f"| {name} | {same}/{len(moves)} ({same / max(len(moves), 1):.2f}) | {rule_success(rule, seeds, args.turns):.3f} |"
        )
    into_hole = sum(_is_hole(rows, move) for rows, move in moves)
    at_risk = [(rows, move) for rows, move in moves if _is_hole(rows, vertical(rows))]
    dodged = sum(not _is_hole(rows, move) for rows, move in at_risk)
    print(
        f"moves into a hole: {into_hole}; boards where `vertical` walks into a hole: {len(at_risk)}, the policy avoided it on {dodged}"
    )


if __name__ == "__main__":
    main()
