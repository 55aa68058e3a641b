"""`HFTrainStrategy`: a Hugging Face causal LM trained with a torch optimizer (CPU or one GPU)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import torch
from safetensors.torch import load_file

from roll_strategies._loading import load_model_and_tokenizer
from roll_strategies.errors import CheckpointError, StrategyError
from roll_strategies.forward import micro_batch_outputs
from roll_strategies.logprobs import batched_log_probs, token_log_probs
from roll_strategies.schedules import adamw_with_warmup, apply_lr_scale
from roll_strategies.weight_sync import WeightBucket, WeightExporter, WeightSyncPlan
from roll_strategies.weights import export_named_weights, load_named_weights

__all__ = ["HFTrainStrategy", "LossFn"]


class LossFn(Protocol):
    """loss_fn(log_probs [B, T], entropy [B, T] | None, micro_batch) -> (scalar loss, {name: float}).

    log_probs / entropy are aligned with micro_batch["input_ids"] (position 0 is 0) and carry grad. With a
    `response_mask` in the micro-batch they are computed at its positions only (zero elsewhere), padded or
    packed (`forward.PACK_CAPACITY_KEY`); with `forward.REF_FULL_KEY` the strategy adds `full_kl` [B, T].
    """

    def __call__(
        self, log_probs: torch.Tensor, entropy: torch.Tensor | None, micro_batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


TRAINER_STATE_FILE = "trainer_state.pt"

T = TypeVar("T")


class HFTrainStrategy:
    """Train (or, with trainable=False, frozen reference) backend on a Hugging Face causal LM.

    AdamW with linear LR warm-up over `warmup_steps` optimizer steps, then constant; grad-norm clipping.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        learning_rate: float = 1e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        max_grad_norm: float = 1.0,
        warmup_steps: int = 0,
        seed: int = 0,
        trainable: bool = True,
    ) -> None:
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.model, self.tokenizer = load_model_and_tokenizer(model_path, device=device, dtype=dtype)
        self.trainable = trainable
        self.max_grad_norm = max_grad_norm
        self.step = 0
        self.exporter = WeightExporter(self.model)
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
        if not trainable:
            self.model.eval().requires_grad_(False)
            return
        self.model.train()
        self.optimizer, self.scheduler = adamw_with_warmup(
            self.model.parameters(),
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            betas=betas,
            eps=eps,
            warmup_steps=warmup_steps,
        )

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] log-probs aligned with batch["input_ids"] (see `token_log_probs`), no grad, on CPU."""
        return batched_log_probs(self.model, batch, micro_batch_size, device=self.device)

    def _to_device(self, mb: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in mb.items()}

    def train_step(
        self,
        micro_batches: Sequence[Mapping[str, torch.Tensor]],
        loss_fn: LossFn,
        *,
        with_entropy: bool,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """One optimizer step accumulated over `micro_batches`.

        Each micro-batch needs input_ids and attention_mask [B, T] plus whatever `loss_fn` reads; its
        loss is weighted by mb["loss_scale"] (float or 0-dim tensor) when given, else 1 / len(micro_batches).
        `lr_scale` multiplies the warm-up schedule's learning rate for this step only (the caller's decay
        schedule, e.g. over pipeline steps). Returns the metrics averaged with the same weights
        (normalised), plus grad_norm and the lr the step used.
        """
        if not 0.0 <= lr_scale <= 1.0:
            raise StrategyError(f"Expected lr_scale in [0, 1], got {lr_scale}; it scales the scheduled lr.")
        if self.optimizer is None or self.scheduler is None:
            raise StrategyError(
                "Expected a trainable strategy for train_step, got one built with trainable=False "
                "(a reference model); build HFTrainStrategy(..., trainable=True) for the actor."
            )
        if not micro_batches:
            raise StrategyError("Expected at least one micro-batch in train_step, got none.")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        total_weight = 0.0
        for raw in micro_batches:
            mb = self._to_device(raw)
            weight = float(mb.get("loss_scale", 1.0 / len(micro_batches)))
            if (
                "response_mask" in mb
            ):  # padded or packed (`pack_capacity`), exact KL with `ref_full_log_probs`
                out = micro_batch_outputs(
                    self.model, mb, with_entropy=with_entropy, pad_id=int(self.tokenizer.pad_token_id or 0)
                )
                log_probs, entropy = out.log_probs, out.entropy
                if out.full_kl is not None:
                    mb["full_kl"] = out.full_kl
                    mb["full_kl_forward"] = out.full_kl_forward
            else:
                log_probs, entropy = token_log_probs(
                    self.model, mb["input_ids"], mb["attention_mask"], with_entropy=with_entropy
                )
            loss, metrics = loss_fn(log_probs, entropy, mb)
            (loss * weight).backward()
            total_weight += weight
            for key, value in {"loss": float(loss.detach()), **metrics}.items():
                sums[key] = sums.get(key, 0.0) + weight * float(value)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        lr = apply_lr_scale(self.optimizer, lr_scale)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self.exporter.bump()
        norm = total_weight if total_weight else 1.0
        return {**{k: v / norm for k, v in sums.items()}, "grad_norm": float(grad_norm), "lr": float(lr)}

    def export_weights(self) -> dict[str, np.ndarray]:
        """CPU float32 numpy copies of all weights (tied ones once), for `HFInferStrategy.update_weights`."""
        return export_named_weights(self.model)

    def weights_fingerprint(self) -> str:
        """Identifies the current weights (changes with every train step and checkpoint load)."""
        return self.exporter.fingerprint()

    def weight_sync_plan(self, version: int, *, dtype: str, bucket_bytes: int) -> WeightSyncPlan:
        """Plan of a bucketed update of the current weights as `version` in the inference `dtype`."""
        return self.exporter.plan(version, dtype=dtype, bucket_bytes=bucket_bytes)

    def weight_bucket(self, plan: WeightSyncPlan, index: int) -> WeightBucket:
        """Bucket `index` of `plan` (CPU tensor in the plan's dtype)."""
        return self.exporter.bucket(plan, index)

    def save_checkpoint(self, path: Path) -> None:
        """Model (safetensors) + tokenizer + optimizer/scheduler/step (torch.save, tensors-only) into `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        state: dict[str, object] = {"step": self.step, "rng": torch.get_rng_state()}
        if self.optimizer is not None and self.scheduler is not None:
            state["optimizer"] = self.optimizer.state_dict()
            state["scheduler"] = self.scheduler.state_dict()
        torch.save(state, path / TRAINER_STATE_FILE)

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote (weights strictly, optimizer and scheduler when trainable)."""
        weights, state_file = checkpoint_files(Path(path), "HFTrainStrategy")
        load_named_weights(
            self.model, _read(weights, lambda: load_file(str(weights), device=str(self.device)))
        )
        self.exporter.bump()
        state = _read(state_file, lambda: torch.load(state_file, weights_only=True, map_location="cpu"))
        self.step = int(state["step"])
        torch.set_rng_state(state["rng"])
        if self.optimizer is not None and self.scheduler is not None:
            if "optimizer" not in state:
                raise CheckpointError(
                    f"Expected optimizer state in {state_file} (a trainable checkpoint), got "
                    "a reference-model checkpoint; load it with trainable=False."
                )
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])


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
