"""Dumped episodes: `roll rollout --dump DIR` writes them, `roll show` prints them.

A dump folder holds
- `trajectories.msgpack`: a msgpack list of `encode_trajectory` payloads (exact token ids, log-probs,
  rewards; read back with `read_dump`, which validates every payload),
- `transcripts.jsonl`: one readable JSON object per episode (observation, response text and reward
  of every turn),
- `transcripts.md`: the same as markdown, for a person.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
from roll_rollout import PayloadError, Trajectory, decode_trajectory, encode_trajectory

DUMP_FILE = "trajectories.msgpack"


def transcript(traj: Trajectory) -> dict[str, Any]:
    """A readable record of one episode."""
    return {
        "tag": traj.tag,
        "seed": traj.seed,
        "success": traj.success,
        "return": traj.score,
        "error": traj.error,
        "turns": [
            {
                "observation": turn.observation,
                "response": turn.response_text,
                "reward": turn.reward,
                "valid": turn.action_is_valid,
            }
            for turn in traj.turns
        ],
    }


def format_transcript(traj: Trajectory, index: int | None = None) -> str:
    """Markdown of one episode: each turn's observation, response and reward."""
    head = f"## episode {index}: " if index is not None else "## "
    outcome = (
        "FAILED: " + traj.error.splitlines()[0]
        if traj.error
        else ("success" if traj.success else "no success")
    )
    lines = [f"{head}{traj.tag}, seed {traj.seed}, return {traj.score:.3f}, {outcome}", ""]
    for k, turn in enumerate(traj.turns, 1):
        valid = "" if turn.action_is_valid else " (invalid action)"
        lines += [f"**turn {k}**, reward {turn.reward:+.3f}{valid}", "", "```", turn.observation, "```", ""]
        lines += [f"> {turn.response_text.strip() or '(empty response)'}", ""]
    return "\n".join(lines)


def write_dump(trajs: Sequence[Trajectory], folder: Path) -> Path:
    """Write the three files of a dump into `folder`; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    payloads = [encode_trajectory(t) for t in trajs]
    (folder / DUMP_FILE).write_bytes(msgpack.packb(payloads, use_bin_type=True))
    with (folder / "transcripts.jsonl").open("w", encoding="utf-8") as out:
        for t in trajs:
            out.write(json.dumps(transcript(t)) + "\n")
    md = [format_transcript(t, i) for i, t in enumerate(trajs)]
    (folder / "transcripts.md").write_text("\n".join(md), encoding="utf-8")
    return folder


def read_dump(path: Path) -> list[Trajectory]:
    """The trajectories of a dump (its folder or its msgpack file), each payload validated."""
    path = Path(path)
    if path.is_dir():
        path = path / DUMP_FILE
    try:
        payloads = msgpack.unpackb(path.read_bytes(), raw=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise PayloadError(f"{path} is not a roll trajectory dump ({exc})") from None
    if not isinstance(payloads, list) or not all(isinstance(p, bytes) for p in payloads):
        raise PayloadError(f"{path} is not a roll trajectory dump (expected a msgpack list of payloads)")
    return [decode_trajectory(p) for p in payloads]
