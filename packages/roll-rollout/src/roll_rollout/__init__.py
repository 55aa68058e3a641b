"""roll-rollout: env managers, the rollout scheduler, policy clients and the msgpack trajectory schema."""

from roll_rollout.env_manager import EpisodeJob, TrajEnvManager
from roll_rollout.errors import PayloadError, RolloutError, SchedulerError
from roll_rollout.policy import (
    BatchingPolicy,
    GenerateRequest,
    GenerateResult,
    PolicyClient,
    RandomPolicy,
    RemotePolicy,
    SamplingSettings,
)
from roll_rollout.prompts import PromptBuilder
from roll_rollout.scheduler import EnvLayout, RolloutScheduler, validation_seeds
from roll_rollout.schema import Trajectory, Turn, decode_trajectory, encode_trajectory, stable_hash
from roll_rollout.worker import EnvSlotSpec, EnvWorker

__version__ = "0.1.0"

__all__ = [
    "BatchingPolicy",  # batches concurrent requests into one backend call
    "EnvLayout",  # env slots -> groups, tags and workers
    "EnvSlotSpec",  # one env instance's type, config and episode limits
    "EnvWorker",  # hosts env managers; run_episodes(jobs) -> trajectories
    "EpisodeJob",  # which episode an env slot plays next
    "GenerateRequest",  # prompt ids + sampling settings
    "GenerateResult",  # sampled ids + log-probs
    "PayloadError",  # corrupt or foreign msgpack payload
    "PolicyClient",  # protocol: async generate(request) -> result
    "PromptBuilder",  # token-in/token-out multi-turn prompts
    "RandomPolicy",  # random tokens: baselines and tests
    "RemotePolicy",  # forwards msgpack requests to a remote generate
    "RolloutError",  # base error
    "RolloutScheduler",  # get_batch(n) of whole groups
    "SamplingSettings",  # temperature, top_p, greedy, max_new_tokens
    "SchedulerError",  # inconsistent layout or batch request
    "TrajEnvManager",  # one env's episode loop
    "Trajectory",  # one episode, msgpack-encodable
    "Turn",  # one agent turn of a trajectory
    "__version__",
    "decode_trajectory",  # validate + decode a payload
    "encode_trajectory",  # msgpack payload of a trajectory
    "stable_hash",  # process-independent 64-bit hash (GiGPO anchors)
    "validation_seeds",  # fixed held-out seeds
]
