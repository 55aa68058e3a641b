"""`HFCriticStrategy`: the PPO critic, a value model (`value_model.py`) trained with its own AdamW.

The same seam as the actor's `HFTrainStrategy`: `compute_values` on a batch (like `compute_log_probs`),
`train_step(micro_batches, loss_fn)` accumulating one optimiser step over micro-batches (padded, or
packed when a micro-batch carries `forward.PACK_CAPACITY_KEY`), checkpoints. The loss is the caller's:
`loss_fn(values [B, T], micro_batch) -> (loss, metrics)`, e.g. a clipped value loss against GAE returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.compute.forward import micro_batch_values, row_slices, value_outputs
from roll_strategies.compute.probes import check_prefix_sharing, packing_supported
from roll_strategies.protocols import ValueLossFn
from roll_strategies.train.checkpoints import read_checkpoint, write_checkpoint
from roll_strategies.train.data_parallel import DataParallelSpec, join_group
from roll_strategies.train.master_weights import MasterWeightOptimizer
from roll_strategies.train.offload import OffloadReport, TrainStateOffload
from roll_strategies.train.optimizer import OptimizerSettings
from roll_strategies.train.train_loop import run_train_step
from roll_strategies.train.value_model import load_value_model

__all__ = ["HFCriticStrategy"]


class HFCriticStrategy:
    """A Hugging Face value model trained with AdamW (linear warm-up, grad-norm clipping: `optimizer`), CPU or one GPU;
    float32 master weights under a bfloat16/float16 `dtype`, non-finite steps skipped (as `HFTrainStrategy`,
    both through `master_weights.MasterWeightOptimizer` and `train_loop.run_train_step`); `data_parallel`: this
    process's rank of the critic's ranks (as `HFTrainStrategy`); `share_prefix`: values and their gradients
    from prefix-tree forwards (as `HFTrainStrategy`; a micro-batch's `forward.SHARE_PREFIX_KEY` overrides it)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        optimizer: OptimizerSettings = OptimizerSettings(),
        seed: int = 0,
        data_parallel: DataParallelSpec | None = None,
        share_prefix: bool = False,
    ) -> None:
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.data_parallel = join_group(data_parallel, self.device)
        self.model, self.tokenizer = load_value_model(model_path, device=device, dtype=dtype)
        self.share_prefix = check_prefix_sharing(self.model, share_prefix, model_path, value_model=True)
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        self.step = 0  # train steps run, skipped non-finite ones included
        self.model.train()
        self.trainer = MasterWeightOptimizer(self.model, optimizer, data_parallel=self.data_parallel)
        self.optimizer, self.scheduler = self.trainer.optimizer, self.trainer.scheduler
        self.offloader = TrainStateOffload(
            self.model,
            self.device,
            lambda: {"masters": self.trainer.masters, "optimizer": self.trainer.optimizer},
        )

    def offload(self) -> OffloadReport:
        """Value model, gradients, fp32 masters and AdamW state to CPU memory (`train.offload`) until `reload`."""
        return self.offloader.offload()

    def reload(self) -> OffloadReport:
        """Undo `offload`."""
        return self.offloader.reload()

    def packing_supported(self) -> bool:
        """Whether packed micro-batches give the same values as padded ones for this model."""
        return packing_supported(self.model, value_model=True)

    def compute_values(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] values at batch["response_mask"] positions (zero elsewhere), no grad, on CPU."""
        ids, mask, needed = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
        out = torch.zeros(ids.shape, dtype=torch.float32)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for sl in row_slices(ids.shape[0], micro_batch_size):
                    if not bool(needed[sl].any()):
                        continue
                    values = value_outputs(
                        self.model,
                        ids[sl].to(self.device),
                        mask[sl].to(self.device),
                        needed[sl].to(self.device),
                        share_prefix=self.share_prefix,
                    )
                    out[sl] = values.cpu()
        finally:
            self.model.train(was_training)
        return out

    def train_step(
        self,
        micro_batches: Sequence[MicroBatch],
        loss_fn: ValueLossFn,
        *,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """One optimiser step accumulated over `micro_batches` (input_ids, attention_mask, response_mask and
        whatever `loss_fn` reads); each loss weighted by mb["loss_scale"] (its share of the mini-batch over all
        ranks; default 1 / (count x ranks)). Returns the weighted metrics plus grad_norm, lr and the non-finite
        counters; a NaN/inf loss skips the step (`train_loop.run_train_step`)."""

        def loss_of(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
            values = micro_batch_values(self.model, mb, pad_id=self.pad_id, share_prefix=self.share_prefix)
            loss, metrics = loss_fn(values, mb)
            return loss, metrics, values

        self.model.train()
        result, _ = run_train_step(
            self.trainer, micro_batches, loss_of, lr_scale=lr_scale, device=self.device
        )
        self.step += 1
        return result

    def save_checkpoint(self, path: Path) -> None:
        """Value model (safetensors, loadable by `load_value_model`; the float32 masters in mixed precision)
        + tokenizer + optimiser state, written by rank 0."""
        if self.data_parallel.is_main:  # every rank holds the same weights and optimiser state
            write_checkpoint(Path(path), self.model, self.tokenizer, self.trainer, self.step)
        self.data_parallel.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote."""
        named, state, state_file = read_checkpoint(Path(path), "HFCriticStrategy", self.device)
        self.trainer.load_state_dict(state, state_file)
        self.trainer.load_weights(self.model, named)
        self.step = int(state["step"])
        if "rng" in state:  # absent in checkpoints written before it was saved
            torch.set_rng_state(state["rng"])
