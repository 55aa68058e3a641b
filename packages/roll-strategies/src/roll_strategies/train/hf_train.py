"""`HFTrainStrategy`: a Hugging Face causal LM trained with a torch optimizer (CPU or one GPU)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
from safetensors.torch import load_file

from roll_strategies.compute.attention_windows import describe_windows
from roll_strategies.compute.forward import micro_batch_outputs
from roll_strategies.compute.logprobs import token_log_probs
from roll_strategies.compute.probes import prefix_sharing_supported
from roll_strategies.compute.recompute import batched_log_probs
from roll_strategies.errors import CheckpointError, StrategyError
from roll_strategies.models._loading import load_model_and_tokenizer
from roll_strategies.sync import endpoints
from roll_strategies.sync.weight_sync import WeightExporter
from roll_strategies.sync.weights import export_named_weights, load_named_weights, unique_named_tensors
from roll_strategies.train.data_parallel import DataParallel, DataParallelSpec, join_group
from roll_strategies.train.master_weights import MasterWeightOptimizer
from roll_strategies.train.offload import OffloadReport, TrainStateOffload
from roll_strategies.train.optimizer import OptimizerSettings
from roll_strategies.train.train_loop import run_train_step

__all__ = ["HFTrainStrategy", "LossFn"]


class LossFn(Protocol):
    """loss_fn(log_probs [B, T], entropy [B, T] | None, micro_batch) -> (scalar loss, {name: float}).

    log_probs / entropy are aligned with micro_batch["input_ids"] (position 0 is 0) and carry grad. With a
    `response_mask` in the micro-batch they are computed at its positions only (zero elsewhere), padded or
    packed (`forward.PACK_CAPACITY_KEY`); with `forward.REFERENCE_KEY` (a frozen model) the strategy adds
    `full_kl` / `full_kl_forward` [B, T], the exact KL to it, computed chunk by chunk of positions.
    """

    def __call__(
        self, log_probs: torch.Tensor, entropy: torch.Tensor | None, micro_batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


TRAINER_STATE_FILE = "trainer_state.pt"

T = TypeVar("T")


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
    ) -> None:
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.model, self.tokenizer = load_model_and_tokenizer(model_path, device=device, dtype=dtype)
        self.share_prefix = check_prefix_sharing(self.model, share_prefix, model_path)
        self.trainable = trainable
        self.max_grad_norm = optimizer.max_grad_norm
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
        micro_batches: Sequence[Mapping[str, torch.Tensor]],
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

        def loss_of(mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
            if "response_mask" in mb:  # padded or packed (`pack_capacity`), exact KL with `reference_model`
                out = micro_batch_outputs(
                    self.model, mb, with_entropy=with_entropy, pad_id=pad_id, share_prefix=self.share_prefix
                )
                log_probs, entropy = out.log_probs, out.entropy
                if out.full_kl is not None:
                    mb["full_kl"] = out.full_kl
                    mb["full_kl_forward"] = out.full_kl_forward
                if out.greedy is not None:  # the loss's actor/sampled_not_greedy
                    mb["greedy"] = out.greedy
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
            data_parallel=self.data_parallel,
            counter=self.trainer.nonfinite,
            device=self.device,
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
            path = Path(path)
            path.mkdir(parents=True, exist_ok=True)
            save_model(self.model, path, self.trainer)
            self.tokenizer.save_pretrained(path)
            state: dict[str, object] = {"step": self.step, "rng": torch.get_rng_state()}
            if self.trainer is not None:
                state.update(self.trainer.state_dict())
            torch.save(state, path / TRAINER_STATE_FILE)
        self.data_parallel.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote (weights strictly, and exactly into the float32 masters;
        optimizer, scheduler and counters when trainable)."""
        weights, state_file = checkpoint_files(Path(path), "HFTrainStrategy")
        named = _read(weights, lambda: load_file(str(weights), device=str(self.device)))
        state = _read(state_file, lambda: torch.load(state_file, weights_only=True, map_location="cpu"))
        if self.trainer is None:
            load_named_weights(self.model, named)
        else:
            self.trainer.load_state_dict(state, state_file)
            self.trainer.load_weights(self.model, named)
        self.exporter.bump()
        self.step = int(state["step"])
        torch.set_rng_state(state["rng"])


def check_prefix_sharing(
    model: torch.nn.Module, share_prefix: bool, model_path: str | Path, value_model: bool = False
) -> bool:
    """`share_prefix`, after checking that `model` gives per-sequence outputs from a prefix-tree forward
    (`probes.prefix_sharing_supported`); a `StrategyError` naming the fix where it does not."""
    if share_prefix and not prefix_sharing_supported(model, value_model=value_model):
        raise StrategyError(
            f"Expected a model whose forward honours a prefix tree's 4D additive attention masks (one per "
            f"attention window) for share_prefix=true, got {type(model).__name__} from {model_path} "
            f"({describe_windows(model)}), whose prefix-tree outputs differ from per-sequence ones (or which "
            "rejects the masks, e.g. flash-attention, or one forward mask for layers of several windows); "
            "set share_prefix=false for this role."
        )
    return share_prefix


def save_model(model: torch.nn.Module, path: Path, trainer: MasterWeightOptimizer | None) -> None:
    """`model` as a Hugging Face folder in `path`, its trained weights being the float32 masters where
    `trainer` keeps them (so a checkpoint restores them exactly; loaders cast to their own dtype)."""
    if trainer is None or not trainer.has_copies:
        model.save_pretrained(path, safe_serialization=True)
    else:
        model.save_pretrained(path, state_dict=trainer.named_weights(model), safe_serialization=True)


def checkpoint_files(path: Path, writer: str) -> tuple[Path, Path]:
    """(weights, trainer state) of a checkpoint folder written by `writer`.save_checkpoint; a missing file is a
    `CheckpointError` listing what the folder holds."""
    weights, state_file = path / "model.safetensors", path / TRAINER_STATE_FILE
    if not weights.exists() or not state_file.exists():
        raise CheckpointError(
            f"Expected {weights.name} and {state_file.name} in {path}, found "
            f"{sorted(p.name for p in path.iterdir()) if path.is_dir() else 'no folder'}; pass a folder "
            f"written by {writer}.save_checkpoint."
        )
    return weights, state_file


def _read(path: Path, load: Callable[[], T]) -> T:
    """`load()`, with any failure to read `path` raised as a `CheckpointError` naming the file."""
    try:
        return load()
    except Exception as exc:  # safetensors, torch and pickle raise unrelated types on a damaged file
        raise CheckpointError(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); the file is damaged or truncated. "
            "Resume from an earlier checkpoint."
        ) from exc
