"""The trajectory-wise env manager: one env slot playing episodes against a policy.

Each turn: build the prompt ids (`PromptBuilder`), ask the policy, decode the sampled ids to text,
let the env parse and apply it. The env's constructor, `reset` and `step` run through `EnvCalls` (a
thread pool with a timeout), so a slow or hung env stalls only its own episode. A failure ends the
episode with `error` set (`failure_kind` tells env errors, env timeouts and policy errors apart) and
never escapes into the rollout; after an env failure the env is dropped and a fresh one is made for the
next episode.

Each slot has its own state of `random` and `np.random` (`roll_envs.EnvRandomState`), swapped in around
every env call: reseeded from `DEFAULT_SEED` before the constructor and from the episode seed before
`reset`, so a group's slots, given one seed, play the same episode even when the env draws from those
process-wide generators. An env that declares `owns_random_state = True` (`roll_envs.BaseEnv`; the
built-in games do) draws only from its own generators: its reset, step and close run without the swap,
concurrently with other envs' calls (the constructor, before the env exists to declare anything, runs
isolated). An undeclared env built from the registry lives in a child process of its own instead
(`process`, see `roll_rollout.hosting.env_process`): its calls take no lock, and one that times out or is cancelled
kills the child. Each turn records the observation it acted on and the env's `state_key` of
that state (`info["state_key"]` of the reset or step that led there; the observation when the env gives
none), GiGPO's anchor.

A multi-player game (the env's `players`) is played move by move by whoever `info["next_player"]` names:
a seat in `fixed_players` by the env's scripted policy of that name (not trained), every other seat by the
policy, each seat with a prompt of its own observations and responses. A seat's turn is credited with the
rewards that seat gets from its move until its next one (`info["rewards"]`), and the episode records each
policy seat's success (`Trajectory.player_success`); `roll_rollout.hosting.players.split_players` makes one
trajectory per seat of it.
"""

from __future__ import annotations

import asyncio
import functools
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from roll_envs.hints import declares_own_random_state
from roll_envs.random_state import DEFAULT_SEED, EnvRandomState

from roll_rollout.hosting.call_pace import CallPace
from roll_rollout.hosting.env_calls import CallTimer, EnvCallError, EnvCalls, EnvCallTimeout
from roll_rollout.hosting.env_checks import check_observation, checked_step, close_quietly, state_key_of
from roll_rollout.hosting.env_process import EnvProcess, EnvProcessError
from roll_rollout.hosting.players import Seats, manager_metrics, move_rewards, player_success
from roll_rollout.plan.seeds import sample_key
from roll_rollout.policies.policy import GenerateRequest, GenerateResult, PolicyClient, SamplingSettings
from roll_rollout.prompts import PromptBuilder
from roll_rollout.schema import Trajectory, Turn

FAILURE_KINDS = ("env_timeout", "env_error", "policy_error")
TIMED_CALLS = ("reset", "step")
"""The env calls whose running time can mark their episode slow (a constructor may load data for long)."""
"""Why an episode failed; the prefix of `Trajectory.error`."""


def failure_kind(traj: Trajectory) -> str | None:
    """`env_timeout`, `env_error` or `policy_error` for a failed trajectory, None for a healthy one."""
    if traj.error is None:
        return None
    kind = traj.error.split(":", 1)[0]
    return kind if kind in FAILURE_KINDS else "policy_error"


@dataclass(frozen=True)
class EpisodeJob:
    """Which episode an env slot plays: `group_id` names the group episode (shared seed) it belongs to.

    `key` is the (env slot, episode id) its turns' sampling keys are made of (`seeds.sample_key`): a backup
    carries its original's, so with a policy that samples by key it takes the original's actions
    (`roll_rollout.scheduling.backups`, replicas); None: its own.
    """

    env_id: int
    group_id: int
    episode_id: int
    seed: int
    sampling: SamplingSettings
    key: tuple[int, int] | None = None

    @property
    def key_fields(self) -> tuple[int, int]:
        """(env slot, episode id) of the sampling keys."""
        return self.key if self.key is not None else (self.env_id, self.episode_id)


class TrajEnvManager:
    """Plays episodes on one env slot; `max_turns` caps the turns of an episode (in a multi-player game, the
    moves of every seat together).

    `make_env()` builds the env (called again after an env failure); `env` may pass a first, already
    built instance (built under `random_state`). Env calls go through `calls`, shared by the slots of a
    worker, each under the slot's `random_state` (a new one when not given). With `process`, the env lives
    in that child process instead (`roll_rollout.hosting.env_process`): `process.make` builds it there (`make_env`
    is not used), its calls take no lock, and a call that times out or is cancelled kills the child rather
    than leaving a thread in the env. `fixed_players` maps the seats of a multi-player game that a scripted
    policy plays to its name (see the module docstring).
    """

    def __init__(
        self,
        make_env: Callable[[], Any],
        tag: str,
        prompts: PromptBuilder,
        max_turns: int,
        max_context_tokens: int,
        calls: EnvCalls,
        env: Any | None = None,
        random_state: EnvRandomState | None = None,
        fixed_players: Mapping[str, str] | None = None,
        process: EnvProcess | None = None,
    ) -> None:
        self._make_env = make_env if process is None else process.make
        self.process = process
        self.env = env
        self.tag = tag
        self.prompts = prompts
        self.max_turns = max_turns
        self.max_context_tokens = max_context_tokens
        self.calls = calls
        self.random_state = random_state if random_state is not None else EnvRandomState()
        self.fixed_players = dict(fixed_players or {})
        self._in_env_call = False
        self.timer = CallTimer()
        """When the running reset or step began (None between them): the worker reports an episode whose
        call has run past `EnvCalls.slow_after_s` (a backup is played)."""
        self._pace: CallPace = calls.pace(env)  # set anew with each new env
        self._hinted: tuple[Any, bool] = (None, False)  # (env, whether it owns its random state)
        self.playing: Trajectory | None = None
        """The episode played last, its turns so far (a slow one's are reported: `backups.prefix_digest`)."""

    async def run_episode(self, job: EpisodeJob, policy: PolicyClient) -> Trajectory:
        """Play one episode from `env.reset(seed=job.seed)`; never raises (but can be cancelled)."""
        traj = self.playing = Trajectory(job.env_id, job.group_id, job.episode_id, self.tag, job.seed)
        try:
            await self._play(traj, job, policy)
        except EnvCallTimeout as exc:
            traj.error = f"env_timeout: {exc}"
            self._drop_env(close=False)  # its thread is still inside the env
        except EnvCallError as exc:
            cause = exc.__cause__ or exc
            traj.error = f"env_error: {exc}\n{''.join(traceback.format_exception(cause, limit=-4))}"
            await self._close_env_in_pool()
        except Exception as exc:
            traj.error = f"policy_error: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        return traj

    def _state_for(self, env: Any) -> EnvRandomState | None:
        """The slot's random state to run `env`'s calls under; None (no isolation) for an env that declares
        it owns its random state (`roll_envs.hints.declares_own_random_state`, read once per env)."""
        if env is not self._hinted[0]:
            self._hinted = (env, declares_own_random_state(env))
        return None if self._hinted[1] else self.random_state

    async def _env_call(self, fn: Callable[..., Any], *args: Any, what: str) -> Any:
        self._in_env_call = True
        timer = self.timer if what in TIMED_CALLS else None
        began = time.monotonic()
        try:
            result = await self._run_env_call(fn, *args, what=f"env {self.tag!r} {what}", timer=timer)
        except asyncio.CancelledError:
            self._drop_env(close=False)  # its thread is still inside the env: never reuse it
            raise
        finally:
            self._in_env_call = False
        if timer is not None:  # only calls that returned: a timed-out one would lift the slow-call threshold
            self.calls.note_duration(time.monotonic() - began)
        return result

    async def _run_env_call(
        self, fn: Callable[..., Any], *args: Any, what: str, timer: CallTimer | None
    ) -> Any:
        if self.process is not None:  # the child's generators are its own: no random state here
            return await self.calls.run(fn, *args, what=what, abandon=self.process.kill, timer=timer)
        state = self._state_for(self.env)
        if state is None:  # an env owning its random state runs its cheap calls inline (`CallPace`)
            return await self.calls.run_paced(self._pace, fn, *args, what=what, timer=timer)
        return await self.calls.run(fn, *args, what=what, random_state=state, timer=timer)

    async def _play(self, traj: Trajectory, job: EpisodeJob, policy: PolicyClient) -> None:
        if self.env is None and self.process is not None:
            # starting the child is roll's work, not the env's: not timed by env_step_timeout_s
            try:
                await asyncio.to_thread(self.process.wait_ready)
            except EnvProcessError as exc:
                raise EnvCallError(f"env {self.tag!r} process: {exc}") from exc
        if self.env is None:
            self.random_state.reseed(DEFAULT_SEED)
            self.env = await self._env_call(self._make_env, what="constructor")
            self._pace = self.calls.pace(self.env)
        if self._state_for(self.env) is not None:  # a declared env's calls never read this state
            self.random_state.reseed(job.seed)
        obs, info = await self._env_call(functools.partial(self.env.reset, seed=job.seed), what="reset")
        check_observation(obs, "reset")
        state_key = state_key_of(obs, info, "reset")
        seats = Seats.of(self.env, self.fixed_players, info)
        wants_messages = bool(getattr(policy, "needs_messages", False))
        metric_log: list[dict[str, float]] = []
        for move in range(self.max_turns):
            mover = seats.mover
            seats.observe(obs)
            fixed = seats.fixed_policy(mover)
            if fixed is None:
                sampled = await self._sample(seats, job, move, policy, wants_messages)
                if sampled is None:
                    traj.truncated = True
                    break
                prompt_ids, result, text = sampled
            else:
                text = await self._env_call(self.env.fixed_policy_answer, fixed, what="fixed_policy_answer")
            next_obs, reward, terminated, truncated, info = await self._env_call(
                self.env.step, text, what="step"
            )
            reward, step_metrics = checked_step(next_obs, reward, info)
            if fixed is None:
                turn = Turn(
                    prompt_ids=prompt_ids,
                    response_ids=list(result.output_ids),
                    log_probs=list(result.log_probs),
                    reward=0.0,
                    action_is_valid=bool(info.get("action_is_valid", True)),
                    action_is_effective=bool(info.get("action_is_effective", True)),
                    state_key=state_key,
                    policy_version=result.policy_version,
                    finish_reason=result.finish_reason,
                    response_text=text,
                    action_is_refused=bool(info.get("action_is_refused", False)),
                    observation=obs,
                    player=mover,
                )
                traj.turns.append(turn)
                seats.took(turn, result.output_ids, text)
                metric_log.append(step_metrics)
            seats.credit(move_rewards(info, mover, reward, seats.players))
            obs, state_key = next_obs, state_key_of(next_obs, info, "step")
            traj.success = bool(info.get("success", False))
            traj.player_success = player_success(info, seats)
            if terminated or truncated:
                traj.terminated, traj.truncated = bool(terminated), bool(truncated)
                break
            seats.next(info)
        else:
            traj.truncated = True
        if seats.players:
            traj.success = any(traj.player_success.values())
        traj.metrics = _episode_metrics(traj, metric_log, getattr(self.env, "metric_aggregation", {}))

    async def _sample(
        self, seats: Seats, job: EpisodeJob, move: int, policy: PolicyClient, wants_messages: bool
    ) -> tuple[list[int], Any, str] | None:
        """The policy's turn for the seat to move: (prompt ids, result, text), or None when its prompt
        leaves no room in the context."""
        history = seats.history()
        prompt_ids = self.prompts.prompt(history.observations, history.responses)
        budget = self.max_context_tokens - len(prompt_ids)
        if budget <= 0:
            return None
        sampling = job.sampling
        if budget < sampling.max_new_tokens:
            sampling = SamplingSettings(**{**sampling.__dict__, "max_new_tokens": budget})
        if sampling.demonstrate:
            return prompt_ids, *await self._demonstration(sampling.max_new_tokens)
        messages = self.prompts.messages(history.observations, history.texts) if wants_messages else None
        key = sample_key(job.seed, *job.key_fields, move)
        result = await policy.generate(GenerateRequest(prompt_ids, sampling, messages, key))
        text = self.prompts.full_response(
            self.prompts.tokenizer.decode(result.output_ids, skip_special_tokens=True)
        )
        return prompt_ids, result, text

    async def _demonstration(self, budget: int) -> tuple[GenerateResult, str]:
        """The env's demonstrated answer (`BaseEnv.demonstration`) as this turn's response, with log-probs 0 (no
        policy drew it); an env without one, or an answer that does not fit the turn, fails the episode."""
        demonstrate = getattr(self.env, "demonstration", None)
        text = await self._env_call(demonstrate, what="demonstration") if callable(demonstrate) else None
        if not isinstance(text, str):
            raise EnvCallError(
                f"env {self.tag!r} has no demonstration for this state (demonstration() gave {text!r:.80}):"
                " demonstration_steps needs an env whose demonstration() answers every state it plays"
            )
        try:
            ids = self.prompts.demonstration_ids(text)
        except ValueError as exc:
            raise EnvCallError(f"env {self.tag!r}: {exc}") from exc
        if len(ids) > budget:
            raise EnvCallError(
                f"env {self.tag!r}: the demonstrated answer {text!r:.80} is {len(ids)} tokens, more than the"
                f" turn's {budget}: raise max_tokens_per_step (or sequence_length)"
            )
        return GenerateResult(ids, [0.0] * len(ids), "stop", policy_version=0), text

    def _drop_env(self, close: bool) -> None:
        """Forget the env so the next episode makes a fresh one; close it if no thread is inside it."""
        env, self.env = self.env, None
        self._pace = self.calls.pace()
        if close and env is not None:
            close_quietly(env)

    async def _close_env_in_pool(self) -> None:
        """Drop an env that raised; close it in a pool thread (its close may misbehave too)."""
        env, self.env = self.env, None
        self._pace = self.calls.pace()
        if env is not None:
            what = f"env {self.tag!r} close"
            try:
                if self.process is not None:
                    await self.calls.run(close_quietly, env, what=what, abandon=self.process.kill)
                else:
                    await self.calls.run(close_quietly, env, what=what, random_state=self._state_for(env))
            except EnvCallError:
                return

    def close(self) -> None:
        """Close the env (unless a thread is still inside it); a child process is asked to exit, or killed
        when a call is still inside it."""
        if self.process is None:
            self._drop_env(close=not self._in_env_call)
            return
        self.env = None
        if self._in_env_call:
            self.process.kill()
        else:
            self.process.close()


_AGGREGATORS: dict[str, Any] = {
    "mean": lambda v: sum(v) / len(v),
    "sum": sum,
    "last": lambda v: v[-1],
    "max": max,
    "min": min,
}


def _episode_metrics(
    traj: Trajectory, step_metrics: list[dict[str, float]], aggregation: Mapping[str, str]
) -> dict[str, float]:
    """Per-episode metrics: the env's own, each aggregated as the env declares (default mean),
    then the manager's (`players.manager_metrics`: success, num_actions, the rates of valid, refused and
    effective turns, score, response length)."""
    out: dict[str, float] = {}
    for name in {k for m in step_metrics for k in m}:
        values = [m[name] for m in step_metrics if name in m]
        out[name] = float(_AGGREGATORS[aggregation.get(name, "mean")](values))
    out.update(manager_metrics(traj.turns, traj.success))
    return out
