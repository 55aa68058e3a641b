"""`EnvWorker`: hosts env slots in one process; each slot runs its own loop of episodes.

A plain class: the pipeline wraps it with `ray.remote` (one actor per `max_env_num_per_worker` env
slots) or uses it in-process. The scheduler talks to it through three calls, all msgpack on the wire:

- `submit(jobs)`: queue episode jobs, each on its env slot (a slot plays its jobs one after another);
- `cancel(episode_ids)`: drop queued jobs and stop running ones (stragglers of a completed group);
- `poll(max_wait_s)`: the episodes finished and the jobs cancelled since the last poll, plus counters;
  waits up to `max_wait_s` for at least one.

Each slot's loop runs until `close`: take the next job, play it, put the trajectory in the outbox, take
the next. Nothing waits for a whole batch, so a slow episode holds up only its own slot.

Each slot's manager is its env type's (`roll_rollout.hosting.env_kinds`): a `TrajEnvManager` for a roll env, an
`AgentEnvManager` for `openai_agent` (an OpenAI-client agent against the worker's one `AgentProxy`, started
with the first such slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import msgpack
from roll_envs.hints import declares_own_random_state, note_dropped_hints
from roll_envs.random_state import EnvRandomState

from roll_rollout.errors import PayloadError
from roll_rollout.hosting.agent_manager import AgentConfig, AgentEnvManager
from roll_rollout.hosting.call_pace import INLINE_BELOW_S
from roll_rollout.hosting.env_calls import BACKUP_AFTER_S, EnvCalls
from roll_rollout.hosting.env_checks import close_quietly
from roll_rollout.hosting.env_kinds import env_kind
from roll_rollout.hosting.env_manager import EpisodeJob, TrajEnvManager, failure_kind
from roll_rollout.hosting.env_process import EnvProcess, EnvRecipe
from roll_rollout.hosting.heap import freeze_startup_heap
from roll_rollout.hosting.players import check_fixed_players
from roll_rollout.policies.agent_proxy import AgentProxy
from roll_rollout.policies.policy import PolicyClient, SamplingSettings
from roll_rollout.prompts import ChatTokenizer, PromptBuilder, instruction_for
from roll_rollout.schema import Trajectory, encode_trajectory, prefix_digest


@dataclass(frozen=True)
class EnvSlotSpec:
    """One env slot: its id, tag, registry type and config, and the episode limits."""

    env_id: int
    tag: str
    env_type: str
    env_config: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 10
    max_history_turns: int | None = 0
    max_context_tokens: int = 2048
    instruction: str | None = None  # None: the env's own `instruction`
    response_prefix: str = ""  # text every assistant turn starts with (prompt ids, read by the env)
    fixed_players: dict[str, str] = field(default_factory=dict)  # seat -> the env's fixed policy playing it


@dataclass(frozen=True)
class EnvCallLimits:
    """How env calls run: threads, timeout per call, hung calls tolerated before a recycle, and whether
    undeclared envs built from the registry run each in a child process of its own (`env_processes`, see
    `roll_rollout.hosting.env_process`; an `env_factory` given to `EnvWorker` keeps its envs in this process), and
    below which duration a call of an env owning its random state runs its next call on the event loop
    (`inline_env_call_s`, see `roll_rollout.hosting.call_pace`; None, the default: `call_pace.INLINE_OPT_IN_S` for
    envs whose `never_blocks` holds (`roll_envs.hints`), every other env's calls in a thread under the
    timeout; a number: that threshold for every env owning its random state, 0 for none: a hang inline holds
    the worker's event loop), and
    the floor of the slow-call threshold past which a reset or step has its episode backed up
    (`backup_after_s`, see `roll_rollout.hosting.env_calls`; 0 turns backups off)."""

    max_env_step_concurrent: int = 8
    env_step_timeout_s: float = 60.0
    max_hung_env_calls: int = 4
    env_processes: bool = True
    inline_env_call_s: float | None = INLINE_BELOW_S
    backup_after_s: float = BACKUP_AFTER_S


def encode_jobs(jobs: Sequence[EpisodeJob]) -> bytes:
    """msgpack payload of a list of episode jobs (each a map of its fields, `sampling` a map too)."""
    return msgpack.packb([asdict(j) for j in jobs])


def decode_jobs(payload: bytes) -> list[EpisodeJob]:
    """Inverse of `encode_jobs`."""
    try:
        raw = msgpack.unpackb(payload, raw=False)
        return [
            EpisodeJob(**{**j, "sampling": SamplingSettings(**j["sampling"]), "key": _pair(j.get("key"))})
            for j in raw
        ]
    except Exception as exc:
        raise PayloadError(f"episode jobs payload is malformed: {exc}") from exc


def _pair(key: Any) -> tuple[int, int] | None:
    """A job's sampling key fields as msgpack brought them (a list), or None."""
    return None if key is None else (int(key[0]), int(key[1]))


def decode_episode_ids(payload: bytes) -> list[int]:
    """A msgpack list of episode ids (the `cancel` payload), validated."""
    try:
        ids = msgpack.unpackb(payload, raw=False)
    except Exception as exc:
        raise PayloadError(f"episode id list is not valid msgpack: {exc}") from exc
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        raise PayloadError(f"expected a msgpack list of int episode ids, got {ids!r:.200}")
    return ids


def make_registry_env(env_type: str, env_config: dict[str, Any]) -> Any:
    """Build an env through the roll-envs registry."""
    import roll_envs

    return roll_envs.make(env_type, **env_config)


@dataclass
class _Slot:
    """One env slot's manager, job queue and current episode."""

    manager: TrajEnvManager | AgentEnvManager
    queue: deque[EpisodeJob] = field(default_factory=deque)
    wakeup: asyncio.Event | None = None
    current: EpisodeJob | None = None
    task: asyncio.Task[Trajectory] | None = None
    loop: asyncio.Task[None] | None = None


class EnvWorker:
    """Owns the env slots of `slots`; their loops play the jobs `submit` queues."""

    def __init__(
        self,
        slots: Sequence[EnvSlotSpec],
        tokenizer: ChatTokenizer,
        policy: PolicyClient,
        env_factory: Callable[[str, dict[str, Any]], Any] = make_registry_env,
        limits: EnvCallLimits | None = None,
    ) -> None:
        limits = limits or EnvCallLimits()
        self.policy = policy
        self.calls = EnvCalls(
            limits.max_env_step_concurrent,
            limits.env_step_timeout_s,
            limits.max_hung_env_calls,
            limits.inline_env_call_s,
            limits.backup_after_s,
        )
        self._slots: dict[int, _Slot] = {}
        # shared: their caches serve every slot
        self._builders: dict[tuple[str, int | None, str], PromptBuilder] = {}
        self._env_processes = limits.env_processes
        self._proxy: AgentProxy | None = None  # started by the first openai_agent slot
        build = {TrajEnvManager: self._env_manager, AgentEnvManager: self._agent_manager}
        for spec in slots:
            manager = build[env_kind(spec.env_type).manager](spec, tokenizer, env_factory)
            self._slots[spec.env_id] = _Slot(manager)
        self._done: list[bytes] = []
        self._cancelled: list[int] = []
        self._cancel_requested: set[int] = set()
        self._outbox_ready: asyncio.Event | None = None
        self._counts: dict[str, int] = {}
        self._closed = False
        freeze_startup_heap()  # a worker process's imports, tokenizer and envs: off the full GC passes

    def _env_manager(
        self, spec: EnvSlotSpec, tokenizer: ChatTokenizer, env_factory: Callable[[str, dict[str, Any]], Any]
    ) -> TrajEnvManager:
        """The manager of a roll env's slot: the policy plays the env turn by turn."""
        # the slot's own `random` and `np.random`; building here fails fast on a bad env config
        random_state = EnvRandomState()
        env = random_state.run(env_factory, spec.env_type, dict(spec.env_config))
        note_dropped_hints(env)  # a hint it inherits but does not keep: say why roll hosts it as undeclared
        check_fixed_players(env, spec.fixed_players, f"env tag {spec.tag!r}")
        instruction = instruction_for(env, spec.instruction)
        key = (instruction, spec.max_history_turns, spec.response_prefix)
        if key not in self._builders:
            self._builders[key] = PromptBuilder(
                tokenizer, instruction, spec.max_history_turns, response_prefix=spec.response_prefix
            )
        process = None
        if self._env_processes and env_factory is make_registry_env and not declares_own_random_state(env):
            # built here to fail fast and read the env; its episodes run in the child (see env_process)
            process = EnvProcess(EnvRecipe.of(spec.env_type, dict(spec.env_config)))
            process.launch()  # it loads while the worker starts; episodes wait for it to be ready
            random_state.run(close_quietly, env)
            env = None
        return TrajEnvManager(
            _bind_factory(env_factory, spec),
            spec.tag,
            self._builders[key],
            spec.max_turns,
            spec.max_context_tokens,
            self.calls,
            env=env,
            random_state=random_state,
            fixed_players=spec.fixed_players,
            process=process,
        )

    def _agent_manager(
        self, spec: EnvSlotSpec, tokenizer: ChatTokenizer, env_factory: Callable[[str, dict[str, Any]], Any]
    ) -> AgentEnvManager:
        """The manager of an `openai_agent` slot (roll_rollout.hosting.agent_manager), on the worker's one proxy."""
        config = AgentConfig.from_env_config(spec.env_config)
        if self._proxy is None:
            self._proxy = AgentProxy(tokenizer)
        random_state = EnvRandomState()
        env = random_state.run(env_factory, config.task_env, dict(config.task_env_config))
        return AgentEnvManager(
            config,
            lambda: env_factory(config.task_env, dict(config.task_env_config)),
            spec.tag,
            self._proxy,
            spec.max_turns,
            spec.max_context_tokens,
            self.calls,
            env=env,
            random_state=random_state,
        )

    @property
    def env_ids(self) -> list[int]:
        """The env slots this worker hosts."""
        return sorted(self._slots)

    # ------------------------------------------------------------------ the three calls
    async def submit(self, jobs_payload: bytes) -> None:
        """Queue every job on its env slot; the slot's loop plays them in order."""
        jobs = decode_jobs(jobs_payload)
        unknown = sorted({j.env_id for j in jobs} - set(self._slots))
        if unknown:
            raise PayloadError(f"env ids {unknown} are not hosted by this worker (it has {self.env_ids})")
        for job in jobs:
            slot = self._slots[job.env_id]
            slot.queue.append(job)
            self._ensure_loop(job.env_id, slot)
            assert slot.wakeup is not None
            slot.wakeup.set()

    async def cancel(self, episode_ids_payload: bytes) -> None:
        """Drop the queued jobs and stop the running episodes of these ids (acknowledged by `poll`)."""
        wanted = set(decode_episode_ids(episode_ids_payload))
        for slot in self._slots.values():
            kept = deque(j for j in slot.queue if j.episode_id not in wanted)
            for job in slot.queue:
                if job.episode_id in wanted:
                    self._acknowledge_cancel(job.episode_id)
            slot.queue = kept
            if slot.current is not None and slot.current.episode_id in wanted and slot.task is not None:
                self._cancel_requested.add(slot.current.episode_id)
                slot.task.cancel()

    async def poll(self, max_wait_s: float = 0.05) -> bytes:
        """msgpack {"done": [trajectory payloads], "cancelled": [episode ids], "stats": {...}}.

        Returns at once when something finished since the last poll, else after up to `max_wait_s`.
        """
        ready = self._outbox_event()
        if not self._done and not self._cancelled and max_wait_s > 0:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel racing its timeout
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_wait_s):
                    await ready.wait()
        ready.clear()
        done, self._done = self._done, []
        cancelled, self._cancelled = self._cancelled, []
        counts, self._counts = self._counts, {}
        stats = {
            **counts,
            "hung_env_calls": self.calls.hung,
            "needs_recycle": self.calls.needs_recycle,
            "threads": threading.active_count(),
            **self._slow_episodes(),
        }
        return msgpack.packb({"done": done, "cancelled": cancelled, "stats": stats})

    def _slow_episodes(self) -> dict[str, list[Any]]:
        """`slow_episodes`: the running episodes whose reset or step has run past `EnvCalls.slow_after_s` (the
        scheduler backs them up), and `slow_prefixes`: [episode id, turns played, their digest] of each
        (`backups.prefix_digest`: what a replica of it must have played). Each such call hands its
        concurrency permit on (`CallTimer.hand_over`)."""
        threshold = self.calls.slow_after_s()
        slow: list[int] = []
        prefixes: list[list[Any]] = []
        now = time.monotonic()
        for slot in self._slots.values() if threshold is not None else ():
            timer = getattr(slot.manager, "timer", None)  # an agent slot's manager makes no timed env calls
            started = None if timer is None else timer.started
            if started is not None and slot.current is not None and now - started > threshold:
                slow.append(slot.current.episode_id)
                played = slot.manager.playing
                if played is not None and played.episode_id == slot.current.episode_id:
                    prefixes.append([played.episode_id, len(played.turns), prefix_digest(played.turns)])
                if timer.hand_over is not None:
                    timer.hand_over()
        return {"slow_episodes": slow, "slow_prefixes": prefixes}

    # ------------------------------------------------------------------ slot loops
    def _ensure_loop(self, env_id: int, slot: _Slot) -> None:
        if slot.loop is None or slot.loop.done():
            slot.wakeup = asyncio.Event()
            slot.loop = asyncio.get_running_loop().create_task(
                self._slot_loop(slot), name=f"env-slot-{env_id}"
            )

    async def _slot_loop(self, slot: _Slot) -> None:
        assert slot.wakeup is not None
        while not self._closed:
            if not slot.queue:
                slot.wakeup.clear()
                await slot.wakeup.wait()
                continue
            job = slot.current = slot.queue.popleft()
            slot.task = asyncio.get_running_loop().create_task(slot.manager.run_episode(job, self.policy))
            await asyncio.wait({slot.task})  # not `await task`: its cancellation must not end this loop
            slot.current = None
            if slot.task.cancelled():
                self._acknowledge_cancel(job.episode_id)
                continue
            traj = slot.task.result()
            if job.episode_id in self._cancel_requested:  # finished before the cancel reached it
                self._cancel_requested.discard(job.episode_id)
            self._finish(traj)

    def _finish(self, traj: Trajectory) -> None:
        kind = failure_kind(traj)
        self._count("finished_episodes")
        if kind is not None:
            self._count(f"{kind}s")
        self._done.append(encode_trajectory(traj))
        self._outbox_event().set()

    def _acknowledge_cancel(self, episode_id: int) -> None:
        self._cancel_requested.discard(episode_id)
        self._cancelled.append(episode_id)
        self._count("cancelled_episodes")
        self._outbox_event().set()

    def _count(self, name: str) -> None:
        self._counts[name] = self._counts.get(name, 0) + 1

    def _outbox_event(self) -> asyncio.Event:
        if self._outbox_ready is None:
            self._outbox_ready = asyncio.Event()
        return self._outbox_ready

    def close(self) -> None:
        """Stop the slot loops and close every env."""
        self._closed = True
        for slot in self._slots.values():
            for task in (slot.task, slot.loop):
                if task is not None and not task.done():
                    task.cancel()
            slot.manager.close()
        self.calls.shutdown()
        if self._proxy is not None:
            self._proxy.stop()


def _bind_factory(env_factory: Callable[[str, dict[str, Any]], Any], spec: EnvSlotSpec) -> Callable[[], Any]:
    """A no-argument constructor of the slot's env (used to remake it after a failure)."""
    return lambda: env_factory(spec.env_type, dict(spec.env_config))
