"""The trajectory-wise env manager: one env running its own episode loop against a policy.

Each turn: build the prompt ids (`PromptBuilder`), ask the policy, decode the sampled ids to text,
let the env parse and apply it. A failing env or policy call ends the episode with `error` set; the
exception never escapes into the rollout, so one broken env cannot abort a whole step.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roll_rollout.policy import GenerateRequest, PolicyClient, SamplingSettings
from roll_rollout.prompts import PromptBuilder
from roll_rollout.schema import Trajectory, Turn


@dataclass(frozen=True)
class EpisodeJob:
    """Which episode an env slot runs next."""

    env_id: int
    group_id: int
    episode_id: int
    seed: int
    sampling: SamplingSettings


class TrajEnvManager:
    """Runs episodes of one env instance; `max_turns` caps the agent turns of an episode."""

    def __init__(
        self, env: Any, tag: str, prompts: PromptBuilder, max_turns: int, max_context_tokens: int
    ) -> None:
        self.env = env
        self.tag = tag
        self.prompts = prompts
        self.max_turns = max_turns
        self.max_context_tokens = max_context_tokens

    async def run_episode(self, job: EpisodeJob, policy: PolicyClient) -> Trajectory:
        """Play one episode from `env.reset(seed=job.seed)`; never raises."""
        traj = Trajectory(job.env_id, job.group_id, job.episode_id, self.tag, job.seed)
        try:
            await self._play(traj, job, policy)
        except Exception as exc:
            traj.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        return traj

    async def _play(self, traj: Trajectory, job: EpisodeJob, policy: PolicyClient) -> None:
        obs, info = self.env.reset(seed=job.seed)
        observations, responses = [obs], []
        metric_log: list[dict[str, float]] = []
        for _ in range(self.max_turns):
            prompt_ids = self.prompts.prompt(observations, responses)
            budget = self.max_context_tokens - len(prompt_ids)
            if budget <= 0:
                traj.truncated = True
                break
            sampling = job.sampling
            if budget < sampling.max_new_tokens:
                sampling = SamplingSettings(**{**sampling.__dict__, "max_new_tokens": budget})
            result = await policy.generate(GenerateRequest(prompt_ids, sampling))
            text = self.prompts.tokenizer.decode(result.output_ids, skip_special_tokens=True)
            next_obs, reward, terminated, truncated, info = self.env.step(text)
            traj.turns.append(
                Turn(
                    prompt_ids=prompt_ids,
                    response_ids=list(result.output_ids),
                    log_probs=list(result.log_probs),
                    reward=float(reward),
                    action_is_valid=bool(info.get("action_is_valid", True)),
                    action_is_effective=bool(info.get("action_is_effective", True)),
                    state_key=str(observations[-1]),
                    policy_version=result.policy_version,
                    finish_reason=result.finish_reason,
                    response_text=text,
                )
            )
            metric_log.append({k: float(v) for k, v in (info.get("metrics") or {}).items()})
            observations.append(next_obs)
            responses.append(result.output_ids)
            traj.success = bool(info.get("success", False))
            if terminated or truncated:
                traj.terminated, traj.truncated = bool(terminated), bool(truncated)
                break
        else:
            traj.truncated = True
        traj.metrics = _episode_metrics(traj, metric_log, getattr(self.env, "metric_aggregation", {}))

    def close(self) -> None:
        """Close the env."""
        self.env.close()


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
    then the manager's (success, num_actions, validity rates, score, response length)."""
    out: dict[str, float] = {}
    for name in {k for m in step_metrics for k in m}:
        values = [m[name] for m in step_metrics if name in m]
        out[name] = float(_AGGREGATORS[aggregation.get(name, "mean")](values))
    turns = traj.turns
    out.update(
        {
            "success": float(traj.success),
            "num_actions": float(len(turns)),
            "action_is_valid": sum(t.action_is_valid for t in turns) / max(len(turns), 1),
            "action_is_effective": sum(t.action_is_effective for t in turns) / max(len(turns), 1),
            "score": traj.score,
            "response_length": traj.num_response_tokens / max(len(turns), 1),
        }
    )
    return out
