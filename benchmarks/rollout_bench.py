"""Rollout benchmarks P1, P2, P3 and P5: the measurements behind `test_bench_rollout.py` and
`rollout_table.py` (which prints them side by side, measured in one run).

- P1 machinery: env-steps/s of 256 FrozenLake envs with an instant scripted policy and real
  tokenisation (the tiny model's tokenizer and chat template): roll's scheduler (Ray env workers, and
  in-process) vs the lockstep pattern of one Ray call per env step vs a plain in-process loop.
- P2 straggler tolerance: time to 512 trajectories from a simulated LLM server (a fixed number of
  concurrent slots, lognormal service time per request) with variable episode lengths: roll's async
  scheduler vs turn-lockstep vs the ideal bound (total service time / slots).
- P3 pipeline step time with async_generation_ratio=1 vs 0 (the real pipeline, tiny model, Ray).
- P5 generation tokens/s of the real HF backend behind the request batcher: 64 concurrent envs vs one.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from roll_rollout import (
    EnvCallLimits,
    EnvLayout,
    EnvSlotSpec,
    EnvWorker,
    PromptBuilder,
    RolloutScheduler,
    SamplingSettings,
    SchedulerSettings,
    WorkerLink,
    envs_per_worker,
)
from roll_rollout.testing import CountdownEnv, ScriptedPolicy, SimulatedLLMServer, countdown_factory

ANSWER = "<answer>Right</answer>"
TAG = "FrozenLake"


@dataclass
class Measurement:
    """One row of a benchmark table."""

    name: str
    value: float
    unit: str
    detail: dict[str, Any] = field(default_factory=dict)


def tiny_model_path() -> Path:
    """The builtin tiny model (built once, cached)."""
    from roll_pipeline.models.cache import resolve_pretrain

    return Path(resolve_pretrain("builtin:tiny-frozen-lake"))


def tiny_tokenizer() -> Any:
    """The tiny model's tokenizer: a real HF tokenizer with a Qwen-style chat template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path())


def instruction() -> str:
    """The default run's FrozenLake system prompt."""
    from roll_pipeline.config.compose import tiny_config

    return tiny_config().custom_envs["FrozenLake"].env_instruction or ""


def answer_ids(tokenizer: Any) -> list[int]:
    """The scripted response as the model would sample it (answer, then eos)."""
    return [*tokenizer.encode(ANSWER, add_special_tokens=False), tokenizer.eos_token_id]


def frozen_slots(layout: EnvLayout, worker: int) -> list[EnvSlotSpec]:
    """FrozenLake slots of `worker`, as the default run configures them."""
    return [
        EnvSlotSpec(e, TAG, "frozen_lake", {}, 8, 0, 1024, instruction())
        for e in layout.env_ids_of_worker(worker)
    ]


# ---------------------------------------------------------------------------------------------- P1
def p1_roll(
    tokenizer: Any,
    num_envs: int = 256,
    batches: int = 3,
    use_ray: bool = True,
    inline_s: float | None = None,
    per_worker: int | None = None,
) -> Measurement:
    """roll's scheduler (async, r=1) with env workers as the config's `max_env_num_per_worker=per_worker` lays
    them out (None, the default: 64 per worker, but no more workers than CPUs): Ray actors or in-process
    objects; `inline_s`: the workers' `inline_env_call_s` (None, the default: FrozenLake declares
    `never_blocks`, so its calls run inline while under 1 ms; 0: every env call in a pool thread)."""
    layout = EnvLayout(num_envs // 8, 8, (TAG,), (num_envs // 8,), envs_per_worker(num_envs, per_worker))
    policy = ScriptedPolicy(answer_ids(tokenizer))
    limits = EnvCallLimits(inline_env_call_s=inline_s)
    spawn = (_ray_spawn if use_ray else _local_spawn)(layout, tokenizer, policy, limits)
    scheduler = RolloutScheduler(
        layout,
        spawn,
        {TAG: SamplingSettings(max_new_tokens=16)},
        settings=SchedulerSettings(async_generation_ratio=1),
    )

    async def run() -> tuple[int, float]:
        await scheduler.get_batch(num_envs)  # warm-up: workers start, imports, first episodes
        start, steps = time.perf_counter(), 0
        for _ in range(batches):
            batch = await scheduler.get_batch(num_envs)
            steps += sum(len(t.turns) for t in batch.trajectories)
        elapsed = time.perf_counter() - start
        await scheduler.stop()
        return steps, elapsed

    steps, elapsed = asyncio.run(run())
    where = (
        f"Ray, {layout.num_workers} env workers of {layout.max_env_num_per_worker}"
        if use_ray
        else "in-process"
    )
    where += "" if inline_s is None else f", inline_env_call_s={inline_s:g}"
    return Measurement(f"P1 roll ({where})", steps / elapsed, "env-steps/s", {"steps": steps, "s": elapsed})


def _local_spawn(
    layout: EnvLayout, tokenizer: Any, policy: Any, limits: EnvCallLimits
) -> Callable[[int], WorkerLink]:
    return lambda w: WorkerLink.in_process(
        EnvWorker(frozen_slots(layout, w), tokenizer, policy, limits=limits)
    )


def _ray_spawn(
    layout: EnvLayout, tokenizer: Any, policy: Any, limits: EnvCallLimits
) -> Callable[[int], WorkerLink]:
    ray = ray_session()
    remote_worker = ray.remote(EnvWorker).options(num_cpus=0)

    def spawn(w: int) -> WorkerLink:
        actor = remote_worker.remote(frozen_slots(layout, w), tokenizer, policy, limits=limits)
        return WorkerLink(
            lambda p: actor.submit.remote(p),
            lambda p: actor.cancel.remote(p),
            lambda wait: actor.poll.remote(wait),
            lambda: ray.kill(actor),
        )

    return spawn


def ray_session() -> Any:
    """A local Ray instance (started once per process, no dashboard)."""
    from roll_pipeline.runtime.cluster import disable_uv_runtime_env

    disable_uv_runtime_env()
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
        )
    # this module is not importable in Ray's workers (benchmarks/ is not a package): ship its classes
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray


class EpisodeStepper:
    """Envs playing one turn per call: build the prompt ids, take the scripted response, decode, step.

    The unit of work of the lockstep baseline (a Ray actor) and of the in-process loop.
    """

    def __init__(self, num_envs: int, tokenizer: Any, response_ids: list[int]) -> None:
        import roll_envs

        self.envs = [roll_envs.make("frozen_lake") for _ in range(num_envs)]
        self.prompts = PromptBuilder(tokenizer, instruction(), max_history_turns=0)
        self.tokenizer = tokenizer
        self.response_ids = response_ids
        self.history: list[tuple[list[str], list[list[int]], int]] = [([], [], 0)] * num_envs

    def reset(self, i: int, seed: int) -> None:
        """Start env `i`'s episode."""
        obs, _ = self.envs[i].reset(seed=seed)
        self.history[i] = ([obs], [], 0)

    def step(self, i: int) -> bool:
        """One turn of env `i`; True when its episode ended (terminated, truncated, or 8 turns)."""
        observations, responses, turns = self.history[i]
        self.prompts.prompt(observations, responses)  # the tokenisation a real turn needs
        text = self.tokenizer.decode(self.response_ids, skip_special_tokens=True)
        obs, _, terminated, truncated, _ = self.envs[i].step(text)
        self.history[i] = ([*observations, obs], [*responses, self.response_ids], turns + 1)
        return terminated or truncated or turns + 1 >= 8


def p1_lockstep_ray(tokenizer: Any, num_envs: int = 256, rounds: int = 2, hosts: int = 16) -> Measurement:
    """The lockstep pattern: one Ray call per env step, every env's turn t before any env's turn t + 1.

    Envs live in `hosts` actors (256 actor processes would need ~50 GB here); each step is still its
    own remote call.
    """
    ray = ray_session()
    per_host = num_envs // hosts
    actors = [
        ray.remote(EpisodeStepper).options(num_cpus=0).remote(per_host, tokenizer, answer_ids(tokenizer))
        for _ in range(hosts)
    ]
    envs = [(a, i) for a in actors for i in range(per_host)]

    def one_round(seed0: int) -> int:
        ray.get([a.reset.remote(i, seed0 + k) for k, (a, i) in enumerate(envs)])
        active, steps = list(envs), 0
        while active:
            done = ray.get([a.step.remote(i) for a, i in active])
            steps += len(active)
            active = [env for env, finished in zip(active, done, strict=True) if not finished]
        return steps

    one_round(10_000)  # warm-up
    start, steps = time.perf_counter(), 0
    for r in range(rounds):
        steps += one_round(r * num_envs)
    elapsed = time.perf_counter() - start
    for actor in actors:
        ray.kill(actor)
    return Measurement(
        "P1 lockstep, one Ray call per env step", steps / elapsed, "env-steps/s", {"hosts": hosts}
    )


def p1_in_process_loop(tokenizer: Any, num_envs: int = 256, rounds: int = 2) -> Measurement:
    """A plain loop in one process doing the same work per turn: the single-process ceiling."""
    stepper = EpisodeStepper(num_envs, tokenizer, answer_ids(tokenizer))
    start, steps = time.perf_counter(), 0
    for r in range(rounds):
        for i in range(num_envs):
            stepper.reset(i, r * num_envs + i)
        active = list(range(num_envs))
        while active:
            steps += len(active)
            active = [i for i in active if not stepper.step(i)]
    elapsed = time.perf_counter() - start
    return Measurement("P1 in-process loop", steps / elapsed, "env-steps/s")


# ---------------------------------------------------------------------------------------------- P2
@dataclass(frozen=True)
class ServerModel:
    """The simulated LLM server of P2."""

    slots: int = 32
    median_s: float = 0.1
    sigma: float = 1.5  # heavy-tailed: the 99th percentile is ~33x the median, as LLM response lengths
    seed: int = 0

    def make(self, response_ids: list[int]) -> SimulatedLLMServer:
        """A fresh server with this model's latency stream."""
        return SimulatedLLMServer(response_ids, self.slots, self.median_s, self.sigma, self.seed)


def _bound_s(turns: int, server: SimulatedLLMServer) -> float:
    """Least wall time for `turns` requests of this server's mean service time on its slots."""
    return turns * (server.busy_s / server.requests) / server.num_slots


def p2_roll(
    tokenizer: Any,
    num_traj: int = 512,
    group_size: int = 8,
    server_model: ServerModel = ServerModel(),
    overprovision: float = 1.0,
    redundancy: int = 1,
    ratio: int = 0,
) -> Measurement:
    """Time to `num_traj` trajectories with roll's scheduler (env groups beyond the batch, or redundancy)."""
    groups = round(num_traj / group_size * overprovision)
    layout = EnvLayout(groups, group_size, ("A",), (groups,), 64, redundancy)
    server = server_model.make(answer_ids(tokenizer))
    factory = countdown_factory(min_turns=2, spread=7)

    def spawn(w: int) -> WorkerLink:
        slots = [EnvSlotSpec(e, "A", "countdown", max_turns=10) for e in layout.env_ids_of_worker(w)]
        return WorkerLink.in_process(EnvWorker(slots, tokenizer, server, env_factory=factory))

    scheduler = RolloutScheduler(
        layout,
        spawn,
        {"A": SamplingSettings(max_new_tokens=8)},
        settings=SchedulerSettings(async_generation_ratio=ratio),
    )

    async def run() -> tuple[int, float]:
        start = time.perf_counter()
        batch = await scheduler.get_batch(num_traj)
        elapsed = time.perf_counter() - start
        await scheduler.stop()
        return sum(len(t.turns) for t in batch.trajectories), elapsed

    turns, elapsed = asyncio.run(run())
    bound = _bound_s(turns, server)
    label = f"{groups} groups" + (
        f" + {redundancy} redundant slot{'s' * (redundancy > 1)}" if redundancy else ""
    )
    mode = "async r=" + str(ratio) if ratio else "sync"
    return Measurement(
        f"P2 roll {mode} ({label}), sigma {server_model.sigma}",
        elapsed,
        "s",
        {"bound_s": bound, "turns": turns, "of_bound": elapsed / bound, "requests": server.requests},
    )


def p2_lockstep(
    tokenizer: Any, num_traj: int = 512, server_model: ServerModel = ServerModel()
) -> Measurement:
    """Turn-lockstep: every env's turn t is answered before any env's turn t + 1 is asked."""
    from roll_rollout import GenerateRequest

    server = server_model.make(answer_ids(tokenizer))
    envs = [CountdownEnv(min_turns=2, spread=7) for _ in range(num_traj)]
    prompts = PromptBuilder(tokenizer, CountdownEnv.instruction, max_history_turns=0)
    sampling = SamplingSettings(max_new_tokens=8)

    async def run() -> tuple[int, float]:
        start = time.perf_counter()
        obs = {i: [env.reset(seed=i // 8)[0]] for i, env in enumerate(envs)}
        responses: dict[int, list[list[int]]] = {i: [] for i in obs}
        active, turns = list(obs), 0
        while active:
            requests = [GenerateRequest(prompts.prompt(obs[i], responses[i]), sampling) for i in active]
            results = await asyncio.gather(*(server.generate(r) for r in requests))
            still = []
            for i, result in zip(active, results, strict=True):
                text = tokenizer.decode(result.output_ids, skip_special_tokens=True)
                ob, _, terminated, truncated, _ = envs[i].step(text)
                obs[i].append(ob)
                responses[i].append(result.output_ids)
                turns += 1
                if not (terminated or truncated or len(responses[i]) >= 10):
                    still.append(i)
            active = still
        return turns, time.perf_counter() - start

    turns, elapsed = asyncio.run(run())
    bound = _bound_s(turns, server)
    return Measurement(
        f"P2 turn-lockstep, sigma {server_model.sigma}",
        elapsed,
        "s",
        {"bound_s": bound, "turns": turns, "of_bound": elapsed / bound},
    )


# ---------------------------------------------------------------------------------------------- P3
def p3_pipeline(ratio: int, steps: int = 10, skip: int = 3, overrides: tuple[str, ...] = ()) -> Measurement:
    """Mean step time of the real pipeline (tiny model, FrozenLake, Ray) after `skip` warm-up steps."""
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.config.compose import compose

    with tempfile.TemporaryDirectory() as out:
        cfg = compose(
            None,
            None,
            [
                f"output_dir={out}",
                "exp_name=p3",
                f"max_steps={steps}",
                "eval_steps=100000",
                "save_steps=100000",
                "print_baselines=false",
                "val_env_manager.num_env_groups=8",
                "track_with=[]",
                f"async_generation_ratio={ratio}",
                *overrides,
            ],
        )
        pipeline = AgenticPipeline(cfg, progress=False)
        try:
            pipeline.run()
        finally:
            pipeline.close()
        rows = [json.loads(line) for line in (Path(out) / "p3" / "metrics.jsonl").read_text().splitlines()]
    kept = [r for r in rows if "time/step_total" in r][skip:]
    step = statistics.mean(r["time/step_total"] for r in kept)
    detail = {
        "rollout_wait_s": statistics.mean(r["time/step_rollout"] for r in kept),
        "train_s": statistics.mean(r.get("time/step_train", 0.0) for r in kept),
        "steps_timed": len(kept),
        "staleness_mean": statistics.mean(r.get("rollout/staleness/mean", 0.0) for r in kept),
    }
    return Measurement(f"P3 pipeline step, async_generation_ratio={ratio}", step, "s/step", detail)


# ---------------------------------------------------------------------------------------------- P5
def p5_generation(concurrent: int, min_turns: int = 256) -> Measurement:
    """Generated tokens/s of the HF backend behind `BatchingPolicy`, with `concurrent` env loops."""
    from roll_pipeline.runtime.policy_server import PolicyServer

    tokenizer = tiny_tokenizer()
    server = PolicyServer(tiny_model_path(), seed=0, num_threads=os.cpu_count(), stop_strings=["</answer>"])
    layout = EnvLayout(concurrent, 1, (TAG,), (concurrent,), 64)
    scheduler = RolloutScheduler(
        layout,
        lambda w: WorkerLink.in_process(EnvWorker(frozen_slots(layout, w), tokenizer, server.policy)),
        {TAG: SamplingSettings(max_new_tokens=16)},
    )

    async def run() -> tuple[int, int, float]:
        await scheduler.get_batch(concurrent)  # warm-up
        start, tokens, turns = time.perf_counter(), 0, 0
        while turns < min_turns:
            batch = await scheduler.get_batch(concurrent)
            turns += sum(len(t.turns) for t in batch.trajectories)
            tokens += sum(t.num_response_tokens for t in batch.trajectories)
        elapsed = time.perf_counter() - start
        await scheduler.stop()
        return tokens, turns, elapsed

    tokens, turns, elapsed = asyncio.run(run())
    sizes = server.policy.batch_sizes
    return Measurement(
        f"P5 HF generation, {concurrent} concurrent env{'s' if concurrent > 1 else ''}",
        tokens / elapsed,
        "tokens/s",
        {"turns": turns, "mean_batch": statistics.mean(sizes) if sizes else 0.0},
    )


def as_json(rows: list[Measurement]) -> str:
    """The rows as JSON (for docs/benchmarks.md provenance)."""
    return json.dumps([asdict(r) for r in rows], indent=2)
