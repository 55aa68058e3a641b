"""Role workers: plain classes owning one strategy each, wrapped with `ray.remote` at the call site.

Each worker picks its backend by `strategy_name` through the registry (`roll_strategies.registry`);
the defaults are the Hugging Face strategies, so callers that pass no name get what they always got.
Ray cannot read attributes of an actor, so state the pipeline needs (step, policy version) has getters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.compute.forward import REFERENCE_KEY, ReferenceKL, reference_kl
from roll_strategies.compute.layout_cost import model_pair_weight
from roll_strategies.compute.probes import check_prefix_sharing, packing_supported
from roll_strategies.errors import StrategyError
from roll_strategies.models._loading import load_model_and_tokenizer
from roll_strategies.protocols import (
    GenerationOutput,
    GenerationParams,
    LossFn,
    SleepableStrategy,
    StreamingInferStrategy,
)
from roll_strategies.sync.weight_sync import WeightBucket, WeightSyncPlan
from roll_strategies.sync.weights import load_named_weights, load_weights_file, save_weights_file
from roll_strategies.train.hf_train import HFTrainStrategy
from roll_strategies.train.offload import OffloadReport, TrainStateOffload
from roll_strategies.workers import base
from roll_strategies.workers.base import RoleWorker

__all__ = ["ActorInferWorker", "ActorTrainWorker", "CriticWorker", "ReferenceWorker"]


def _policy_model(strategy: object) -> torch.nn.Module:
    """The trained Hugging Face model of a train strategy (`hf_train`; under `deepspeed_train` the module its
    engine wraps, whose ZeRO-3 hooks gather the weights on use), for the forward paths of `forward.py`."""
    model = getattr(strategy, "model", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(
        getattr(strategy, "device", None), torch.device
    ):
        raise StrategyError(
            f"Expected a train strategy holding a Hugging Face model (hf_train, deepspeed_train) for the exact KL, "
            f"got {type(strategy).__name__}; use strategy_name hf_train for actor_train, or kl_penalty k3."
        )
    return model


class _HoldsReference(Protocol):
    """A worker holding a reference model (`ActorTrainWorker`'s frozen copy, `ReferenceWorker`'s own)."""

    def _reference(self) -> torch.nn.Module: ...


def _save_reference(self: _HoldsReference, path: str | Path) -> None:
    """The held reference's weights to one safetensors file at `path` (in its own dtype: restored exactly)."""
    save_weights_file(self._reference(), Path(path))


def _load_reference(self: _HoldsReference, path: str | Path) -> None:
    """Undo `save_reference`: the held reference's weights from `path`."""
    load_weights_file(self._reference(), Path(path))


class ActorTrainWorker(RoleWorker):
    """Owns the trainable policy (`hf_train` or `deepspeed_train`); other kwargs as `RoleWorker`'s.

    With `reference_model_path` it also holds a frozen copy of the reference model (in `reference_dtype`, on
    the strategy's device) for the exact KL estimators (`full`, `full_forward`): both models' logits are
    then in this process, so the KL is computed chunk by chunk of positions (`compute_reference_kl`, and
    `train_step(..., with_full_kl=True)`) and no [tokens, vocabulary] tensor leaves it. Both run as a prefix
    tree when the strategy was built with `share_prefix` (the reference follows the strategy's setting).
    """

    role, default_strategy = "train", "hf_train"

    def __init__(
        self,
        model_path: str | Path,
        *,
        reference_model_path: str | Path | None = None,
        reference_dtype: str = "float32",
        **worker_kwargs: Any,
    ) -> None:
        super().__init__(model_path, **worker_kwargs)
        self.reference_model: torch.nn.Module | None = None
        self._reference_offload: TrainStateOffload | None = None
        if reference_model_path is not None:
            _policy_model(self.strategy)  # a clear error now rather than at the first step
            model, _ = load_model_and_tokenizer(
                reference_model_path, device=str(self.strategy.device), dtype=reference_dtype
            )
            self.reference_model = model.eval().requires_grad_(False)
            # frozen: no train state beside the model
            self._reference_offload = TrainStateOffload(model, self.strategy.device, lambda: {})
            check_prefix_sharing(self.reference_model, self._share_prefix(), reference_model_path)

    def _share_prefix(self) -> bool:
        """The strategy's `share_prefix` (False for backends without one)."""
        return bool(getattr(self.strategy, "share_prefix", False))

    def _reference(self) -> torch.nn.Module:
        if self.reference_model is None:
            raise StrategyError(
                "Expected an ActorTrainWorker built with reference_model_path for the exact KL (kl_penalty full "
                "or full_forward), got one without; pass the reference role's model folder."
            )
        return self.reference_model

    compute_log_probs = base.compute_log_probs

    def train_step(
        self,
        micro_batches: Sequence[MicroBatch],
        loss_fn: LossFn,
        *,
        with_full_kl: bool = False,
        **step_kwargs: Any,
    ) -> dict[str, float]:
        """One optimizer step (`base.train_step`: `with_entropy` and `lr_scale` go to the strategy).

        `with_full_kl`: each micro-batch also gets `full_kl` / `full_kl_forward` [B, T], the exact KL between
        the trained model and the held reference, with grad (the loss of kl_penalty full / full_forward)."""
        if with_full_kl:
            reference = self._reference()
            micro_batches = [{**mb, REFERENCE_KEY: reference} for mb in micro_batches]
        return base.train_step(self, micro_batches, loss_fn, **step_kwargs)

    def export_weights(self) -> dict[str, np.ndarray]:
        """All weights at once (float32 numpy) for `ActorInferWorker.update_weights`."""
        return self.strategy.export_weights()

    weights_fingerprint = base.weights_fingerprint

    def weight_sync_plan(
        self, version: int, *, dtype: str, bucket_bytes: int, transport: str = "cpu"
    ) -> WeightSyncPlan:
        """Plan of a bucketed update as `version` in the inference `dtype` (see `roll_strategies.sync.weight_sync`);
        a `transport` other than "cpu" keeps the buckets on the GPU (`sync.transport`)."""
        if transport == "cpu":
            return self.strategy.weight_sync_plan(version, dtype=dtype, bucket_bytes=bucket_bytes)
        return self.strategy.weight_sync_plan(
            version, dtype=dtype, bucket_bytes=bucket_bytes, transport=transport
        )

    def weight_bucket(self, plan: WeightSyncPlan, index: int) -> WeightBucket:
        """Bucket `index` of `plan`, for `ActorInferWorker.receive_weight_bucket`."""
        return self.strategy.weight_bucket(plan, index)

    save_checkpoint, load_checkpoint = base.save_checkpoint, base.load_checkpoint

    def get_step(self) -> int:
        """Optimizer steps taken (restored by load_checkpoint)."""
        return self.strategy.step

    def packing_supported(self) -> bool:
        """Whether packed micro-batches (`forward.PACK_CAPACITY_KEY`) give the padded results on this model
        (False for backends whose train step has no packed forward: the pipeline then batches dynamically)."""
        return isinstance(self.strategy, HFTrainStrategy) and packing_supported(self.strategy.model)

    def attention_pair_weight(self) -> float:
        """One attention pair's cost in tokens on the trained model (`layout_cost.model_pair_weight`): with it the
        pipeline counts the tokens each micro-batch computes as the strategy's choice of tree or rows does."""
        return model_pair_weight(_policy_model(self.strategy))

    def compute_reference_kl(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> ReferenceKL:
        """The exact KL(pi || ref) and KL(ref || pi) per response token of the current (old) policy against the
        held reference, and the reference's log-probs of the response tokens: [B, T] each, no grad."""
        model = _policy_model(self.strategy)
        return reference_kl(
            model,
            self._reference(),
            batch,
            micro_batch_size,
            device=self.strategy.device,
            share_prefix=self._share_prefix(),
        )

    def reference_from_policy(self) -> None:
        """The held reference takes the trained model's weights as they are now (cast to its dtype): the KL
        term then measures against this policy (`kl_reference: rl_start`). Under ZeRO-3 every rank calls it."""
        load_named_weights(self._reference(), self.strategy.export_weights())

    save_reference, load_reference = _save_reference, _load_reference

    offload_unavailable = base.offload_unavailable

    def offload(self) -> OffloadReport:
        """The trainer's parameters, gradients, fp32 masters and optimiser state (and the held reference model) to
        CPU memory while a colocated inference engine runs (see the strategy's `offload`)."""
        report = self.strategy.offload()
        return report if self._reference_offload is None else report + self._reference_offload.offload()

    def reload(self) -> OffloadReport:
        """Undo `offload` before the next phase that computes on this worker."""
        report = self.strategy.reload()
        return report if self._reference_offload is None else report + self._reference_offload.reload()


class ActorInferWorker(RoleWorker):
    """Owns the sampling copy of the policy (`hf_infer` or `vllm`); other kwargs go to the strategy."""

    role, default_strategy = "infer", "hf_infer"

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: GenerationParams,
        sample_keys: Sequence[int | None] | None = None,
    ) -> list[GenerationOutput]:
        """Batched sampling, token ids in and out, with per-token log-probs; a row with a sample key gets the
        same tokens whatever it is batched with (see the strategy's `generate`)."""
        return self.strategy.generate(prompts, params, sample_keys)

    def forget_turns(self) -> None:
        """Drop the sequences the engine keeps between calls for later turns (hf_infer's `TurnCache`); other
        engines ignore it."""
        forget = getattr(self.strategy, "forget_turns", None)
        if forget is not None:
            forget()

    def streams(self) -> bool:
        """Whether the strategy batches continuously (`StreamingInferStrategy`, vllm): requests should reach it
        one by one as they come (`agenerate_one`), not gathered into `generate` batches."""
        return isinstance(self.strategy, StreamingInferStrategy)

    async def agenerate_one(
        self, prompt: Sequence[int], params: GenerationParams, sample_key: int | None = None
    ) -> GenerationOutput:
        """One request, submitted to a continuously batching engine at once (see `streams`)."""
        if not isinstance(self.strategy, StreamingInferStrategy):
            raise StrategyError(
                f"Expected a continuously batching strategy (vllm) for agenerate_one, got "
                f"{type(self.strategy).__name__}; use generate, which batches."
            )
        return await self.strategy.agenerate_one(prompt, params, sample_key)

    compute_log_probs = base.compute_log_probs

    def update_weights(self, named_tensors: Mapping[str, np.ndarray | torch.Tensor], version: int) -> None:
        """Load all weights exported by the train worker at once; set the policy version (stale ones refused)."""
        self.strategy.update_weights(named_tensors, version)

    def receive_weight_bucket(self, bucket: WeightBucket) -> dict[str, float] | None:
        """One bucket of a bucketed update; the last returns weight_sync/* metrics, earlier ones None."""
        return self.strategy.receive_weight_bucket(bucket)

    def confirm_weights(self, version: int, fingerprint: str) -> None:
        """Record `version` without a transfer (the weights with `fingerprint` are held already)."""
        self.strategy.confirm_weights(version, fingerprint)

    weights_fingerprint = base.weights_fingerprint

    def sleep(self, level: int | None = None) -> bool:
        """Free accelerator memory while a colocated trainer runs (`level` None: the strategy's own, vllm's
        `sleep_level`). Returns whether it sleeps now: False where unsupported (the strategy logs why)."""
        if not isinstance(self.strategy, SleepableStrategy):
            return False
        return bool(self.strategy.sleep() if level is None else self.strategy.sleep(level))

    def sleep_unavailable(self) -> str | None:
        """Why the strategy cannot sleep here (vllm's reason, e.g. the CPU build), None when it can or when it
        says nothing."""
        if not isinstance(self.strategy, SleepableStrategy):
            return f"{type(self.strategy).__name__} has no sleep"
        return getattr(self.strategy, "sleep_unavailable", None)

    def wake_up(self) -> None:
        """Undo `sleep`."""
        if isinstance(self.strategy, SleepableStrategy):
            self.strategy.wake_up()

    def get_policy_version(self) -> int:
        """Version passed with the last update (0 before any)."""
        return self.strategy.policy_version

    def close(self) -> None:
        """Shut the strategy's engine down where it runs one (vllm: its engine processes and loop thread)."""
        close = getattr(self.strategy, "close", None)
        if callable(close):
            close()


class ReferenceWorker(RoleWorker):
    """Owns the frozen reference policy (`hf_train` frozen, the default, or `hf_infer`); `share_prefix` goes to
    the strategy (prefix-tree forwards for the reference log-probs)."""

    role, default_strategy = "reference", "hf_train"

    def __init__(
        self,
        model_path: str | Path,
        *,
        num_threads: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        strategy_name: str | None = None,
        strategy_config: Mapping[str, Any] | None = None,
        share_prefix: bool = False,
    ) -> None:
        super().__init__(
            model_path,
            num_threads=num_threads,
            strategy_name=strategy_name,
            strategy_config=strategy_config,
            device=device,
            dtype=dtype,
            share_prefix=share_prefix,
        )

    compute_log_probs = base.compute_log_probs

    def _reference(self) -> torch.nn.Module:
        """The frozen model both reference backends hold (`hf_train` frozen, `hf_infer`)."""
        model = getattr(self.strategy, "model", None)
        if not isinstance(model, torch.nn.Module):
            raise StrategyError(
                f"Expected a reference strategy holding a Hugging Face model (hf_train, hf_infer), got"
                f" {type(self.strategy).__name__}; use one of those for the reference role."
            )
        return model

    def load_weights(self, named_tensors: Mapping[str, np.ndarray | torch.Tensor]) -> None:
        """Replace the reference's weights in place by `named_tensors` (the actor's `export_weights()`: the KL
        term then measures against that policy, `kl_reference: rl_start`), strictly, cast to its dtype."""
        load_named_weights(self._reference(), named_tensors)

    save_reference, load_reference = _save_reference, _load_reference

    offload_unavailable, offload, reload = base.offload_unavailable, base.offload, base.reload


class CriticWorker(RoleWorker):
    """Owns the PPO critic (`hf_critic`: a value model with its own optimiser); other kwargs go to it."""

    role, default_strategy = "critic", "hf_critic"

    def compute_values(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """Values [B, T] at the response positions, aligned with input_ids."""
        return self.strategy.compute_values(batch, micro_batch_size)

    train_step = base.train_step

    def packing_supported(self) -> bool:
        """Whether packed micro-batches give the padded values on this model."""
        return self.strategy.packing_supported()

    def attention_pair_weight(self) -> float:
        """One attention pair's cost in tokens on the value model (`layout_cost.model_pair_weight`)."""
        return model_pair_weight(self.strategy.model)

    save_checkpoint, load_checkpoint = base.save_checkpoint, base.load_checkpoint

    offload_unavailable, offload, reload = base.offload_unavailable, base.offload, base.reload
