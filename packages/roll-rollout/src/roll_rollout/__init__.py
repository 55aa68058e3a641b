"""roll-rollout: env managers, the rollout scheduler, policy clients and the msgpack trajectory schema.

Its rooms: `scheduling/` (the driver's side), `hosting/` (env workers and their slots), `policies/` (policy
clients and the `openai_agent` proxy), `plan/` (layout and seeds), on the low modules `schema.py`, `prompts.py`,
`wire.py` and `errors.py`; `testing.py` holds test doubles. The flat paths of before (`roll_rollout.scheduler`,
...) still import, as the moved modules, with a DeprecationWarning (`_moved.py`).
"""

from types import ModuleType

from roll_rollout import _moved
from roll_rollout.errors import PayloadError, RolloutError, SchedulerError
from roll_rollout.hosting.env_calls import EnvCallError, EnvCalls, EnvCallTimeout
from roll_rollout.hosting.env_manager import FAILURE_KINDS, EpisodeJob, TrajEnvManager, failure_kind
from roll_rollout.hosting.players import SeatsError, check_fixed_players, split_group, split_players
from roll_rollout.hosting.worker import EnvCallLimits, EnvSlotSpec, EnvWorker
from roll_rollout.plan.layout import EnvLayout, TagMix, envs_per_worker
from roll_rollout.plan.seeds import first_training_seeds, sample_key, validation_seeds
from roll_rollout.policies.policy import (
    BatchingPolicy,
    GenerateRequest,
    GenerateResult,
    PolicyClient,
    RandomPolicy,
    RemotePolicy,
    SamplingSettings,
    StreamingPolicy,
)
from roll_rollout.prompts import PromptBuilder
from roll_rollout.scheduling.groups import OUTCOMES, GroupFilter, RolloutBatch, SpawnWorker, WorkerLink
from roll_rollout.scheduling.scheduler import RolloutScheduler, SchedulerSettings
from roll_rollout.schema import Trajectory, Turn, decode_trajectory, encode_trajectory, stable_hash

__version__ = "0.2.0"

__all__ = [
    "FAILURE_KINDS",  # env_timeout, env_error, policy_error: prefixes of Trajectory.error
    "OUTCOMES",  # where a dispatched episode can end up (the scheduler's ledger)
    "BatchingPolicy",  # batches concurrent requests into one backend call
    "EnvCallError",  # an env's reset/step/constructor raised
    "EnvCallLimits",  # threads, timeout and hung-call limit of a worker's env calls
    "EnvCallTimeout",  # an env call did not return in time
    "EnvCalls",  # runs env calls in a bounded thread pool under a timeout
    "EnvLayout",  # env slots -> groups (with redundancy), tags and workers
    "EnvSlotSpec",  # one env slot's type, config and episode limits
    "EnvWorker",  # hosts env slots, each looping over its queued episodes (submit/cancel/poll)
    "EpisodeJob",  # which episode an env slot plays next
    "GenerateRequest",  # prompt ids + sampling settings
    "GenerateResult",  # sampled ids + log-probs
    "GroupFilter",  # (group scores, keep) -> kept group indices (StarPO-S)
    "PayloadError",  # corrupt or foreign msgpack payload
    "PolicyClient",  # protocol: async generate(request) -> result
    "PromptBuilder",  # token-in/token-out multi-turn prompts
    "RandomPolicy",  # random tokens: baselines and tests
    "RemotePolicy",  # forwards msgpack requests to a remote generate
    "RolloutBatch",  # get_batch's result: trajectories, failed episodes, rollout metrics
    "RolloutError",  # base error
    "RolloutScheduler",  # async env-granular rollout: get_batch(n) of whole groups
    "SamplingSettings",  # temperature, top_p, greedy, max_new_tokens
    "SchedulerError",  # inconsistent layout or batch request, or a rollout that cannot deliver
    "SchedulerSettings",  # sync/async mode, fault limits, timeout, StarPO-S filter
    "SeatsError",  # fixed_players that do not fit the env
    "SpawnWorker",  # worker index -> WorkerLink of a fresh env worker
    "StreamingPolicy",  # hands each request to a continuously batching engine at once (vLLM)
    "TagMix",  # splits a batch's groups among tags in the partition's proportions
    "TrajEnvManager",  # one env's episode loop
    "Trajectory",  # one episode, msgpack-encodable
    "Turn",  # one agent turn of a trajectory
    "WorkerLink",  # submit/cancel/poll/kill of one env worker (in-process or Ray)
    "__version__",
    "check_fixed_players",  # fixed_players against an env's seats and fixed policies
    "decode_trajectory",  # validate + decode a payload
    "encode_trajectory",  # msgpack payload of a trajectory
    "envs_per_worker",  # the envs one worker hosts: requested, or 64 but no more workers than CPUs
    "failure_kind",  # why a trajectory failed (None if healthy)
    "first_training_seeds",  # the first training seeds a scheduler seeded with a run's seed draws
    "sample_key",  # the random stream of one turn's sampling (seed, env slot, episode, turn)
    "split_group",  # one group episode -> one group per policy seat
    "split_players",  # a multi-player episode -> one trajectory per policy seat
    "stable_hash",  # process-independent 64-bit hash (GiGPO anchors)
    "validation_seeds",  # fixed held-out seeds
]

_moved.install()


def __getattr__(name: str) -> ModuleType:
    """An old flat module path read as an attribute (`roll_rollout.scheduler`): the moved module, warning."""
    if f"{__name__}.{name}" in _moved.MOVED:
        return _moved.load_moved(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
