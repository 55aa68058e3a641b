"""`HFTrainStrategy`: a Hugging Face causal LM trained with a torch optimizer (CPU or one GPU)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.compute.forward import micro_batch_outputs
from roll_strategies.compute.logprobs import token_log_probs
from roll_strategies.compute.probes import check_prefix_sharing
from roll_strategies.compute.recompute import batched_log_probs
from roll_strategies.errors import StrategyError
from roll_strategies.models._loading import load_model_and_tokenizer
from roll_strategies.protocols import LossFn
from roll_strategies.sync import endpoints
from roll_strategies.sync.weight_sync import WeightExporter
from roll_strategies.sync.weights import export_named_weights, load_named_weights, unique_named_tensors
from roll_strategies.train.checkpoints import read_checkpoint, write_checkpoint
from roll_strategies.train.data_parallel import DataParallel, DataParallelSpec, join_group
from roll_strategies.train.master_weights import MasterWeightOptimizer
from roll_strategies.train.offload import OffloadReport, TrainStateOffload
from roll_strategies.train.optimizer import OptimizerSettings
from roll_strategies.train.train_loop import run_train_step

__all__ = ["HFTrainStrategy"]


class HFTrainStrategy:
    """Train (or, with trainable=False, frozen reference) backend on a Hugging Face causal LM.

    AdamW with linear LR warm-up over `warmup_steps` optimizer steps, then constant; grad-norm clipping (all
    from `optimizer`, an `OptimizerSettings`).
    With a bfloat16/float16 `dtype` the model computes in it while AdamW steps float32 master weights
    (fp16 with dynamic loss scaling); a step with a non-finite loss or gradient norm is skipped and
    counted (see `master_weights`).

    `data_parallel`: this process's rank of the role (`data_parallel.DataParallelSpec`); each rank trains on its
    share of every mini-batch and the gradients are summed over the ranks (`train_loop`). Every rank calls
    `train_step` for every step; `save_checkpoint` is written by rank 0 (all ranks call it).

    `share_prefix`: every forward on trained samples (train_step's micro-batches unless one sets
    `forward.SHARE_PREFIX_KEY` false, compute_log_probs) runs as a prefix tree (`forward`): rows sharing a
    prompt or history compute it once, with the same outputs and gradients.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        optimizer: OptimizerSettings = OptimizerSettings(),
        seed: int = 0,
        trainable: bool = True,
        data_parallel: DataParallelSpec | None = None,
        share_prefix: bool = False,
        defer_sync: bool | None = None,
    ) -> None:
        """`defer_sync`: no host sync between micro-batches (`train_loop.run_train_step`; None: on CUDA)."""
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.defer_sync = self.device.type == "cuda" if defer_sync is None else defer_sync
        self.model, self.tokenizer = load_model_and_tokenizer(model_path, device=device, dtype=dtype)
        self.share_prefix = check_prefix_sharing(self.model, share_prefix, model_path)
        self.step = 0  # train steps run, skipped non-finite ones included (the warm-up counts applied ones)
        self.trainer: MasterWeightOptimizer | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
        self.data_parallel = DataParallel(0, 1, self.device)
        self.offloader = TrainStateOffload(self.model, self.device, self.trainer_state)
        if not trainable:
            self.model.eval().requires_grad_(False)
            self.exporter = WeightExporter(self.model)
            return
        self.data_parallel = join_group(data_parallel, self.device)
        self.model.train()
        self.trainer = MasterWeightOptimizer(self.model, optimizer, data_parallel=self.data_parallel)
        self.optimizer, self.scheduler = self.trainer.optimizer, self.trainer.scheduler
        self.exporter = WeightExporter(self.model, tensors=self._named_weights)

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] log-probs aligned with batch["input_ids"] (see `token_log_probs`), no grad, on CPU."""
        return batched_log_probs(
            self.model, batch, micro_batch_size, device=self.device, share_prefix=self.share_prefix
        )

    def train_step(
        self,
        micro_batches: Sequence[MicroBatch],
        loss_fn: LossFn,
        *,
        with_entropy: bool,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """One optimizer step accumulated over `micro_batches` (this rank's, with N data-parallel ranks).

        Each micro-batch needs input_ids and attention_mask [B, T] plus whatever `loss_fn` reads; its loss is
        weighted by mb["loss_scale"] (float or 0-dim tensor: its share of the mini-batch over all ranks) when
        given, else 1 / (len(micro_batches) x ranks). `lr_scale` multiplies the warm-up schedule's learning
        rate for this step only (the caller's decay schedule, e.g. over pipeline steps). Returns the metrics
        averaged with the same weights (normalised, over all ranks), plus grad_norm, the lr the step used and
        the non-finite counters (`train_loop.run_train_step`). A micro-batch with a NaN/inf loss ends the
        loop: the step is skipped on every rank and its metrics hold the non-finite loss.
        """
        if self.trainer is None:
            raise StrategyError(
                "Expected a trainable strategy for train_step, got one built with trainable=False "
                "(a reference model); build HFTrainStrategy(..., trainable=True) for the actor."
            )
        pad_id = int(self.tokenizer.pad_token_id or 0)

        def loss_of(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
            if "response_mask" in mb:  # padded or packed (`pack_capacity`), exact KL with `reference_model`
                out = micro_batch_outputs(
                    self.model, mb, with_entropy=with_entropy, pad_id=pad_id, share_prefix=self.share_prefix
                )
                log_probs, entropy = out.log_probs, out.entropy
            else:
                log_probs, entropy = token_log_probs(
                    self.model, mb["input_ids"], mb["attention_mask"], with_entropy=with_entropy
                )
            loss, metrics = loss_fn(log_probs, entropy, mb)
            return loss, metrics, log_probs

        self.model.train()
        result, applied = run_train_step(
            self.trainer,
            micro_batches,
            loss_of,
            lr_scale=lr_scale,
            device=self.device,
            defer_sync=self.defer_sync,
        )
        self.step += 1
        if applied:  # a skipped step keeps the weights: nothing new to sync
            self.exporter.bump()
        return result

    def _named_weights(self) -> dict[str, torch.Tensor]:
        """The weights as trained: float32 masters where the model computes in a lower precision."""
        if self.trainer is None:
            return unique_named_tensors(self.model)
        return self.trainer.named_weights(self.model)

    def export_weights(self) -> dict[str, np.ndarray]:
        """CPU float32 numpy copies of all weights (tied ones once, the float32 masters in mixed precision),
        for `HFInferStrategy.update_weights`."""
        if self.trainer is None:
            return export_named_weights(self.model)
        return {
            n: t.detach().to("cpu", torch.float32).numpy().copy() for n, t in self._named_weights().items()
        }

    # weight sync: the sending end, through `self.exporter` (see `sync.endpoints`)
    weights_fingerprint = endpoints.exported_fingerprint
    weight_sync_plan = endpoints.weight_sync_plan
    weight_bucket = endpoints.weight_bucket

    def offload(self) -> OffloadReport:
        """Parameters, gradients, fp32 masters and AdamW state to CPU memory (`train.offload`) until `reload`;
        a second call moves nothing."""
        return self.offloader.offload()

    def reload(self) -> OffloadReport:
        """Undo `offload`: everything back on the strategy's device (nothing moves when not offloaded)."""
        return self.offloader.reload()

    def trainer_state(self) -> dict[str, Any]:
        """The masters and optimiser beside the model (none for a frozen reference)."""
        if self.trainer is None:
            return {}
        return {"masters": self.trainer.masters, "optimizer": self.trainer.optimizer}

    def save_checkpoint(self, path: Path) -> None:
        """Model (safetensors; the float32 masters in mixed precision) + tokenizer + optimizer/scheduler/
        loss scale/non-finite counters/step (torch.save, tensors-only) into `path`, written by rank 0."""
        if self.data_parallel.is_main:  # every rank holds the same weights and optimiser state
            write_checkpoint(Path(path), self.model, self.tokenizer, self.trainer, self.step)
        self.data_parallel.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote (weights strictly, and exactly into the float32 masters;
        optimizer, scheduler and counters when trainable)."""
        named, state, state_file = read_checkpoint(Path(path), "HFTrainStrategy", self.device)
        if self.trainer is None:
            load_named_weights(self.model, named)
        else:
            self.trainer.load_state_dict(state, state_file)
            self.trainer.load_weights(self.model, named)
        self.exporter.bump()
        self.step = int(state["step"])
        torch.set_rng_state(state["rng"])
