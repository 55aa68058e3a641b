"""Pipeline-side worker glue: the policy server (inference strategy + request batching).

Plain class; `cluster.spawn` makes it a Ray actor or keeps it in-process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from roll_rollout import BatchingPolicy, GenerateRequest, GenerateResult


class PolicyServer:
    """Serves `generate` requests from env managers with batched calls of an inference strategy."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        seed: int = 0,
        num_threads: int | None = None,
        max_batch_size: int = 256,
        stop_strings: Sequence[str] = (),
        strategy_name: str = "hf_infer",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        from roll_strategies import ActorInferWorker

        # Stop strings of any length end a response at the sampled token completing them (the strategy matches
        # them in the decoded text); eos always stops. Checked before the model loads.
        self.stop_strings = _checked_stop_strings(stop_strings)
        self.worker = ActorInferWorker(
            model_path,
            device=device,
            dtype=dtype,
            seed=seed,
            num_threads=num_threads,
            strategy_name=strategy_name,
            strategy_config=strategy_config,
        )
        self.policy = BatchingPolicy(self._generate_batch, max_batch_size=max_batch_size)
        self.version = 0

    def _generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        from roll_strategies import GenerationParams

        s = requests[0].sampling
        params = GenerationParams(
            max_new_tokens=max(r.sampling.max_new_tokens for r in requests),
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            greedy=s.greedy,
            stop_strings=self.stop_strings,
        )
        # Each request's own sample key: its tokens do not depend on what else is in this batch.
        outputs = self.worker.generate(
            [r.prompt_ids for r in requests], params, [r.sample_key for r in requests]
        )
        results = []
        for req, out in zip(requests, outputs, strict=True):
            ids, lps, reason = out.output_ids, out.log_probs, out.finish_reason
            if len(ids) > req.sampling.max_new_tokens:  # a shorter budget inside a mixed batch
                ids, lps, reason = (
                    ids[: req.sampling.max_new_tokens],
                    lps[: req.sampling.max_new_tokens],
                    "length",
                )
            results.append(GenerateResult(list(ids), list(lps), reason, self.version))
        return results

    async def generate_many(self, payload: bytes) -> bytes:
        """msgpack list of requests in, msgpack list of results out (see `RemotePolicy`)."""
        return await self.policy.generate_many_payload(payload)

    async def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        """Load new weights once no batch is being generated."""
        async with self.policy.lock:
            self.worker.update_weights(named_tensors, version)
            self.version = version

    def weights_fingerprint(self) -> str:
        """Fingerprint of the weights served (see `roll_strategies.weight_sync`)."""
        return self.worker.weights_fingerprint()

    async def receive_weight_bucket(self, bucket: Any) -> dict[str, float] | None:
        """One bucket of a versioned update; the last one is applied once no batch is being generated."""
        if bucket.index < bucket.num_buckets - 1:  # staged only: the served weights do not change
            return self.worker.receive_weight_bucket(bucket)
        async with self.policy.lock:
            metrics = self.worker.receive_weight_bucket(bucket)
            self.version = self.worker.get_policy_version()
        return metrics

    async def confirm_weights(self, version: int, fingerprint: str) -> int:
        """Serve the weights held (`fingerprint`) as `version` without a transfer; returns the version."""
        async with self.policy.lock:
            self.worker.confirm_weights(version, fingerprint)
            self.version = self.worker.get_policy_version()
        return self.version

    def get_policy_version(self) -> int:
        """The version stamped on every result generated now."""
        return self.version

    async def batch_sizes(self, reset: bool = True) -> list[int]:
        """Sizes of the batches generated since the last call."""
        sizes = list(self.policy.batch_sizes)
        if reset:
            self.policy.batch_sizes.clear()
        return sizes


def _checked_stop_strings(stop_strings: Sequence[str]) -> tuple[str, ...]:
    """The stop strings as a tuple; an empty one (it would end every response at once) is refused."""
    if isinstance(stop_strings, str) or not all(isinstance(s, str) and s for s in stop_strings):
        raise ValueError(
            f"Expected actor_infer.generating_args.stop_strings to be a list of non-empty strings, got "
            f"{stop_strings!r}; remove the empty entries (eos always ends a response)."
        )
    return tuple(stop_strings)
