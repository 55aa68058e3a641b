"""Pipeline-side worker glue: the policy server (inference strategy + how requests reach it).

Plain class; `cluster.spawn` makes it a Ray actor or keeps it in-process. The strategy's capability picks
how requests reach it: a backend that generates a batch at a time (hf_infer) gets them gathered into
batches (`BatchingPolicy`); one whose engine batches continuously (vllm, `ActorInferWorker.streams`) gets
each on its own as soon as it arrives, and answers each as soon as it is done (`StreamingPolicy`). A remote
call (`generate_many`) may carry several requests: each still goes to the engine on its own, and the call
returns when the last of its requests is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from roll_rollout import (
    BatchingPolicy,
    GenerateRequest,
    GenerateResult,
    SamplingSettings,
    StreamingPolicy,
)


class PolicyServer:
    """Serves `generate` requests from env managers through an inference strategy: batched calls
    (`BatchingPolicy`), or one submission per request to a continuously batching engine (`StreamingPolicy`).

    `max_batch_size` caps a batch of `BatchingPolicy`; for vllm it becomes vLLM's `max_num_seqs` unless
    strategy_config names its own. `worker_kwargs` go to `ActorInferWorker` as they are, with its defaults and
    its strategy's (device, dtype, seed, num_threads, share_prefix: hf_infer encodes each distinct prompt of a
    batch once; vllm turns on its prefix caching)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        max_batch_size: int = 256,
        stop_strings: Sequence[str] = (),
        strategy_name: str = "hf_infer",
        strategy_config: Mapping[str, Any] | None = None,
        **worker_kwargs: Any,
    ) -> None:
        from roll_strategies import ActorInferWorker

        # Stop strings of any length end a response at the sampled token completing them (the strategy matches
        # them in the decoded text); eos always stops. Checked before the model loads.
        self.stop_strings = _checked_stop_strings(stop_strings)
        if strategy_name == "vllm":  # the engine batches continuously: the cap is its max_num_seqs
            from roll_strategies.infer.vllm_infer import with_max_num_seqs

            strategy_config = with_max_num_seqs(strategy_config, max_batch_size)
        self.worker = ActorInferWorker(
            model_path, strategy_name=strategy_name, strategy_config=strategy_config, **worker_kwargs
        )
        self.policy: BatchingPolicy | StreamingPolicy = (
            StreamingPolicy(self._generate_one)
            if self.worker.streams()
            else BatchingPolicy(self._generate_batch, max_batch_size=max_batch_size)
        )
        self.version = 0
        self._asleep = False

    def streams(self) -> bool:
        """Whether requests reach the engine one by one as they come (continuous batching)."""
        return isinstance(self.policy, StreamingPolicy)

    async def _generate_one(self, request: GenerateRequest) -> GenerateResult:
        """One request to a continuously batching engine, seeded by its own sample key."""
        params = generation_params(request.sampling, request.sampling.max_new_tokens, self.stop_strings)
        out = await self.worker.agenerate_one(request.prompt_ids, params, request.sample_key)
        # the version cannot change while a request is in flight: an update waits for it (`DrainLock`)
        return GenerateResult(list(out.output_ids), list(out.log_probs), out.finish_reason, self.version)

    def _generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        max_new_tokens = max(r.sampling.max_new_tokens for r in requests)
        params = generation_params(requests[0].sampling, max_new_tokens, self.stop_strings)
        # Each request's own sample key: its tokens do not depend on what else is in this batch.
        outputs = self.worker.generate(
            [r.prompt_ids for r in requests], params, [r.sample_key for r in requests]
        )
        return within_budgets(requests, outputs, self.version)

    async def generate_many(self, payload: bytes) -> bytes:
        """msgpack list of requests in, msgpack list of results out (see `RemotePolicy`)."""
        return await self.policy.generate_many_payload(payload)

    async def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        """Load new weights once no batch is being generated."""
        self._check_awake()
        async with self.policy.lock:
            self.worker.update_weights(named_tensors, version)
            self.version = version

    def weights_fingerprint(self) -> str:
        """Fingerprint of the weights served (see `roll_strategies.sync.weight_sync`)."""
        return self.worker.weights_fingerprint()

    async def receive_weight_bucket(self, bucket: Any) -> dict[str, float] | None:
        """One bucket of a versioned update; the last one is applied once no batch is being generated."""
        self._check_awake()
        if bucket.index < bucket.num_buckets - 1:  # staged only: the served weights do not change
            return self.worker.receive_weight_bucket(bucket)
        async with self.policy.lock:
            metrics = self.worker.receive_weight_bucket(bucket)
            self.version = self.worker.get_policy_version()
        return metrics

    async def confirm_weights(self, version: int, fingerprint: str) -> int:
        """Serve the weights held (`fingerprint`) as `version` without a transfer; returns the version."""
        self._check_awake()
        async with self.policy.lock:
            self.worker.confirm_weights(version, fingerprint)
            self.version = self.worker.get_policy_version()
        return self.version

    async def sleep(self) -> bool:
        """Put the engine to sleep while a colocated trainer runs: wait for the requests in flight, then hold
        new ones back until `wake_up`. Returns whether it sleeps; False where the strategy cannot (the CPU
        build of vLLM; `sleep_unavailable` says why), and requests then go on as before."""
        if self._asleep:
            return True
        await self.policy.lock.acquire()
        try:
            slept = await asyncio.to_thread(self.worker.sleep)
        except BaseException:
            self.policy.lock.release()
            raise
        if not slept:
            self.policy.lock.release()
        self._asleep = slept
        return slept

    async def wake_up(self) -> None:
        """Undo `sleep` and let requests in again (after a level-2 sleep, sync the weights before sampling)."""
        if not self._asleep:
            return
        try:
            await asyncio.to_thread(self.worker.wake_up)
        finally:
            self._asleep = False
            self.policy.lock.release()

    def _check_awake(self) -> None:
        if self._asleep:  # the lock is held until wake_up: waiting for it here would never end
            raise RuntimeError(
                "Expected an awake inference engine to load weights into, got a sleeping one; call wake_up "
                "before the weight sync (the pipeline does, `InferSleeper.before_weight_sync`)."
            )

    def sleep_unavailable(self) -> str | None:
        """Why the engine cannot sleep here (None: it can)."""
        return self.worker.sleep_unavailable()

    def close(self) -> None:
        """Shut the inference engine down (the cluster calls this at shutdown)."""
        self.worker.close()

    def get_policy_version(self) -> int:
        """The version stamped on every result generated now."""
        return self.version

    def release_memory(self) -> Any:
        """Give this process's freed heap memory back to the OS (`roll_strategies.release_freed_memory`); its pid
        and resident set after."""
        return self.worker.release_memory()

    async def forget_turns(self) -> None:
        """Drop the sequences the engine keeps for later turns, once no batch is being generated."""
        async with self.policy.lock:
            self.worker.forget_turns()

    async def batch_sizes(self, reset: bool = True) -> list[int]:
        """Sizes of the batches generated since the last call."""
        sizes = list(self.policy.batch_sizes)
        if reset:
            self.policy.batch_sizes.clear()
        return sizes


def generation_params(
    sampling: SamplingSettings, max_new_tokens: int, stop_strings: Sequence[str] = ()
) -> Any:
    """The strategy's `GenerationParams` for requests sampled with `sampling`, up to `max_new_tokens`."""
    from roll_strategies import GenerationParams

    return GenerationParams(
        max_new_tokens=max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        greedy=sampling.greedy,
        stop_strings=tuple(stop_strings),
    )


def within_budgets(
    requests: Sequence[GenerateRequest], outputs: Sequence[Any], version: int
) -> list[GenerateResult]:
    """One batch's outputs as results, each cut to its request's own token budget (a batch runs to the
    largest): a cut response ends for "length"."""
    results = []
    for req, out in zip(requests, outputs, strict=True):
        ids, lps, reason = out.output_ids, out.log_probs, out.finish_reason
        if len(ids) > req.sampling.max_new_tokens:  # a shorter budget inside a mixed batch
            ids, lps, reason = (
                ids[: req.sampling.max_new_tokens],
                lps[: req.sampling.max_new_tokens],
                "length",
            )
        results.append(GenerateResult(list(ids), list(lps), reason, version))
    return results


def _checked_stop_strings(stop_strings: Sequence[str]) -> tuple[str, ...]:
    """The stop strings as a tuple; an empty one (it would end every response at once) is refused."""
    if isinstance(stop_strings, str) or not all(isinstance(s, str) and s for s in stop_strings):
        raise ValueError(
            f"Expected actor_infer.generating_args.stop_strings to be a list of non-empty strings, got "
            f"{stop_strings!r}; remove the empty entries (eos always ends a response)."
        )
    return tuple(stop_strings)
