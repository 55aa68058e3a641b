"""Seats of a multi-player game: who moves, whose prompt, whose reward, and one trajectory per seat.

A single-agent env is the one-seat case: its seat is named "" and the policy plays it. In a game of several
players (the env's `players`), `fixed_players` gives some seats to the env's scripted policies and the
policy plays every other seat (self-play when that is more than one). `split_players` turns an episode
into one trajectory per policy seat: the seat's own turns, rewards and success, in a group of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roll_rollout.hosting.env_calls import EnvCallError
from roll_rollout.schema import Trajectory, Turn


class SeatsError(ValueError):
    """`fixed_players` does not fit the env (the message names the seat or policy and the choices)."""


def check_fixed_players(env: Any, fixed_players: Mapping[str, str], where: str) -> None:
    """`fixed_players` names seats of `env` and fixed policies it offers, and leaves the policy a seat."""
    if not fixed_players:
        return
    players = tuple(getattr(env, "players", ()) or ())
    if not players:
        raise SeatsError(
            f"{where}: fixed_players {dict(fixed_players)} is set but env {type(env).__name__} has one "
            "player (no `players`); remove fixed_players."
        )
    offered = tuple(getattr(env, "fixed_policies", ()) or ())
    for seat, name in fixed_players.items():
        if seat not in players:
            raise SeatsError(
                f"{where}: fixed_players names seat {seat!r}; env {type(env).__name__} has {list(players)}."
            )
        if name not in offered:
            raise SeatsError(
                f"{where}: fixed_players gives seat {seat!r} to {name!r}; env {type(env).__name__} offers the "
                f"fixed policies {list(offered)}."
            )
    if set(players) <= set(fixed_players):
        raise SeatsError(
            f"{where}: fixed_players gives every seat ({list(players)}) to a fixed policy; leave at least one "
            "to the trained policy."
        )


@dataclass
class SeatHistory:
    """What one seat has seen and said: the prompt of its next turn."""

    observations: list[str] = field(default_factory=list)
    responses: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    last_turn: Turn | None = None
    unclaimed: float = 0.0  # rewards that reached the seat before its first turn


@dataclass
class Seats:
    """The seats of one episode: who moves now and each seat's history."""

    players: tuple[str, ...]
    fixed: dict[str, str]
    mover: str
    histories: dict[str, SeatHistory] = field(default_factory=dict)

    @classmethod
    def of(cls, env: Any, fixed_players: Mapping[str, str], reset_info: Mapping[str, Any]) -> Seats:
        """The seats of `env` after a reset whose info is `reset_info` (it names the first mover)."""
        players = tuple(getattr(env, "players", ()) or ())
        mover = str(reset_info.get("next_player", "")) if players else ""
        if players and mover not in players:
            raise EnvCallError(  # the env is at fault: the episode fails as an env error
                f"env {type(env).__name__} has players {list(players)} but its reset info names "
                f"next_player {mover!r}; a multi-player env's reset must say who moves first."
            )
        return cls(players, dict(fixed_players), mover)

    def fixed_policy(self, seat: str) -> str | None:
        """The fixed policy playing `seat`, or None: the policy plays it."""
        return self.fixed.get(seat)

    @property
    def policy_seats(self) -> list[str]:
        """The seats the policy plays, in seat order ([""] for one agent)."""
        return [p for p in self.players if p not in self.fixed] if self.players else [""]

    def history(self, seat: str | None = None) -> SeatHistory:
        """The history of `seat` (default: the mover)."""
        return self.histories.setdefault(self.mover if seat is None else seat, SeatHistory())

    def observe(self, obs: str) -> None:
        """The mover sees `obs`."""
        self.history().observations.append(obs)

    def took(self, turn: Turn, response_ids: Sequence[int], text: str) -> None:
        """The mover's policy turn: it takes any reward that reached the seat before its first turn."""
        history = self.history()
        history.responses.append(list(response_ids))
        history.texts.append(text)
        turn.reward += history.unclaimed
        history.unclaimed, history.last_turn = 0.0, turn

    def credit(self, rewards: Mapping[str, float]) -> None:
        """Add each seat's reward from the last move to that seat's latest turn."""
        for seat, reward in rewards.items():
            if seat in self.fixed or (self.players and seat not in self.players):
                continue
            history = self.history(seat)
            if history.last_turn is None:
                history.unclaimed += reward
            else:
                history.last_turn.reward += reward

    def next(self, info: Mapping[str, Any]) -> None:
        """Move on to the seat `info["next_player"]` names."""
        if not self.players:
            return
        nxt = str(info.get("next_player", ""))
        if nxt not in self.players:
            raise EnvCallError(  # the env is at fault: the episode fails as an env error
                f"the env's step info names next_player {nxt!r} while the game goes on; expected one of "
                f"{list(self.players)}."
            )
        self.mover = nxt


def move_rewards(
    info: Mapping[str, Any], mover: str, reward: float, players: tuple[str, ...]
) -> dict[str, float]:
    """Every seat's reward for a move: `info["rewards"]` in a multi-player game, else the mover's `reward`."""
    if not players:
        return {mover: reward}
    raw = info.get("rewards")
    if not isinstance(raw, Mapping):
        return {mover: reward}
    return {str(p): float(r) for p, r in raw.items()}


def player_success(info: Mapping[str, Any], seats: Seats) -> dict[str, bool]:
    """Each policy seat's success after a move ({} for one agent)."""
    if not seats.players:
        return {}
    raw = info.get("player_success") or {}
    return {seat: bool(raw.get(seat, False)) for seat in seats.policy_seats}


def manager_metrics(turns: Sequence[Turn], success: bool) -> dict[str, float]:
    """The env manager's episode metrics of `turns`: success, turns, the rates of valid, refused and
    effective turns, score and response length."""
    n = max(len(turns), 1)
    return {
        "success": float(success),
        "num_actions": float(len(turns)),
        "action_is_valid": sum(t.action_is_valid for t in turns) / n,
        "action_is_refused": sum(t.action_is_refused for t in turns) / n,
        "action_is_effective": sum(t.action_is_effective for t in turns) / n,
        "score": float(sum(t.reward for t in turns)),
        "response_length": sum(len(t.response_ids) for t in turns) / n,
    }


def split_players(traj: Trajectory) -> list[Trajectory]:
    """One trajectory per policy seat of a multi-player episode (`player` set; its turns, success and
    metrics, the env's own metrics kept); `[traj]` for one agent. Group ids stay the episode's: the
    caller gives each seat a group of its own (`split_group`)."""
    if not traj.player_success:
        return [traj]
    out = []
    for seat, won in traj.player_success.items():
        turns = [t for t in traj.turns if t.player == seat]
        metrics = {**traj.metrics, **manager_metrics(turns, won)}
        out.append(dataclasses.replace(traj, turns=turns, success=won, metrics=metrics, player=seat))
    return out


def split_group(trajectories: Sequence[Trajectory], new_key: Any) -> list[Trajectory]:
    """The trajectories of one group episode, one per policy seat, grouped by seat: the first seat keeps
    the group id, each other seat gets `new_key()` (so each seat's trajectories form a group of their own)."""
    by_seat: dict[str, list[Trajectory]] = {}
    for traj in trajectories:
        for part in split_players(traj):
            by_seat.setdefault(part.player, []).append(part)
    out: list[Trajectory] = []
    for i, parts in enumerate(by_seat.values()):
        key = parts[0].group_id if i == 0 else new_key()
        out += [dataclasses.replace(p, group_id=key) for p in parts]
    return out
