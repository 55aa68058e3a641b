"""`DeepSpeedTrainStrategy` (`deepspeed_train`): a Hugging Face causal LM trained under DeepSpeed ZeRO 0-3.

Same contract as `HFTrainStrategy`: `train_step(micro_batches, loss_fn, *, with_entropy, lr_scale)` is one
optimiser step over the given micro-batches (each weighted by its "loss_scale", else 1/n), AdamW with a
linear warm-up over `warmup_steps` optimiser steps, `lr_scale` multiplying that step's scheduled lr,
grad-norm clipping at `max_grad_norm`. DeepSpeed itself is imported only when a strategy is built (the
`deepspeed` extra); it runs on the CPU with gloo (alone: rank 0 of 1 on a free port).

The loop is the one every train strategy runs (`train_loop.run_train_step`); what DeepSpeed keeps is the
gradient backend (`DeepSpeedGradients`): its engine owns backward (ZeRO-2/3 reduce and partition the
gradients inside it), the gradient norm, clipping and the overflow check, so the fp32 masters of hf_train's
`MasterWeightOptimizer` are DeepSpeed's own here (bf16: its bf16 / ZeRO optimisers keep fp32 masters).

Data parallelism (`data_parallel`, N ranks in one group): ZeRO-1/2 partition the optimiser state (and the
gradients), ZeRO-3 the weights too, 1/N per rank. DeepSpeed averages the ranks' gradients, so each rank
back-propagates N x its weight: the step equals the DP=1 step on the same rows (`train_loop`'s weights). ZeRO's
collectives run inside forward (ZeRO-3) and backward (ZeRO-2/3), so with N ranks every rank must run the same
number of micro-batches (checked, an error on all ranks rather than a hang), and every rank must call
`compute_log_probs` (with as many micro-batches), `export_weights` / `weight_bucket`, and `save_checkpoint` /
`load_checkpoint` together. At ZeRO-0 in float32 DeepSpeed steps a plain torch AdamW that checks nothing, so the
strategy sums the gradients itself (DeepSpeed's own all-reduce turned off) and checks their norm before the
step.

Non-finite steps are skipped and counted as in hf_train (`nonfinite_steps`, `nonfinite_in_a_row`), within what
DeepSpeed allows. DeepSpeed computes the gradient norm inside `engine.step()` and skips a step whose norm is
not finite itself (its bf16 optimiser and ZeRO 1-3: no update, no scheduler step, `engine.skipped_steps` + 1);
the plain torch AdamW it runs at ZeRO-0 in float32 checks nothing, so there the strategy checks the norm
before the step. A non-finite loss is checked before its backward, but the step cannot simply be left out:
the earlier micro-batches' gradients already sit in ZeRO's partitioned buffers, which only DeepSpeed's own
overflow path clears. So that micro-batch back-propagates a NaN instead of its loss, and the step takes the
non-finite-gradient path above (one backward's cost, on a step that is lost anyway; with N ranks every rank
runs its remaining micro-batches too).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from roll_algos.micro_batch import MicroBatch

from roll_strategies.compute.forward import REFERENCE_KEY, SHARE_PREFIX_KEY, micro_batch_outputs
from roll_strategies.compute.logprobs import token_log_probs
from roll_strategies.compute.probes import check_prefix_sharing
from roll_strategies.compute.recompute import batched_log_probs
from roll_strategies.errors import CheckpointError, StrategyError
from roll_strategies.models._loading import load_model_and_tokenizer
from roll_strategies.protocols import LossFn
from roll_strategies.sync import endpoints
from roll_strategies.sync.weight_sync import WeightExporter
from roll_strategies.sync.weights import unique_named_tensors
from roll_strategies.train.data_parallel import DataParallel, DataParallelSpec, join_group
from roll_strategies.train.deepspeed_config import build_deepspeed_config, zero_stage
from roll_strategies.train.offload import OffloadReport, allocated_bytes, optimizer_state_tensors
from roll_strategies.train.optimizer import OptimizerSettings
from roll_strategies.train.schedules import adamw_with_warmup, apply_lr_scale
from roll_strategies.train.train_loop import NonFiniteCount, StepOutcome, run_train_step

__all__ = ["DeepSpeedGradients", "DeepSpeedTrainStrategy"]

DEEPSPEED_DIR, DEEPSPEED_TAG = "deepspeed", "state"


class DeepSpeedGradients:
    """The `train_loop.GradientBackend` of a DeepSpeed engine (see the module docstring)."""

    def __init__(
        self,
        engine: Any,
        optimizer: torch.optim.Optimizer,
        ds_config: Mapping[str, Any],
        data_parallel: DataParallel,
    ) -> None:
        self.engine, self.optimizer, self.data_parallel = engine, optimizer, data_parallel
        self.nonfinite = NonFiniteCount()
        self.zero_stage = zero_stage(ds_config)
        # only the plain torch AdamW of ZeRO-0 in float32 lets a non-finite gradient through to the weights
        self.checks_grad_norm = self.zero_stage > 0 or bool(ds_config["bf16"]["enabled"])
        self.lockstep = data_parallel.size > 1
        # DeepSpeed averages the ranks' gradients; at ZeRO-0 float32 the strategy sums them itself instead
        self.sums_itself = not self.checks_grad_norm and data_parallel.size > 1
        if self.sums_itself:
            engine.enable_backward_allreduce = False
        self.multiplier = 1.0 if self.sums_itself else float(data_parallel.size)

    def zero_grad(self) -> None:
        """Nothing to do: DeepSpeed clears its buffers in every `engine.step()`, applied or skipped."""

    def backward(self, loss: torch.Tensor, weight: float) -> None:
        """`engine.backward` of `loss * weight` (x N ranks: DeepSpeed averages them)."""
        self.engine.backward(loss * (weight * self.multiplier), scale_wrt_gas=False)

    def discard(self, outputs: torch.Tensor) -> None:
        """Make this step's gradients NaN (see the module docstring): DeepSpeed then skips the step and
        clears every buffer it accumulated the earlier micro-batches in."""
        if not outputs.requires_grad:
            raise StrategyError(
                "Expected log-probs that depend on the weights in a micro-batch with a non-finite loss, got "
                "constant ones; the step cannot be skipped safely. Give every micro-batch response tokens."
            )
        self.engine.backward(outputs.float().sum() * math.nan, scale_wrt_gas=False)

    def step(self, lr_scale: float, nonfinite_loss: bool) -> StepOutcome:
        """engine.step() unless the gradients are non-finite (ZeRO-0 float32 checks them here)."""
        local_norm = math.nan
        if self.zero_stage == 0:
            params = [p for p in self.engine.module.parameters() if p.requires_grad]
            if self.sums_itself:
                self.data_parallel.sum_gradients(params)
            local_norm = _grad_norm(params)
        if not self.checks_grad_norm and not math.isfinite(local_norm):
            self.engine.zero_grad()  # ZeRO-0 float32: the gradients live on the parameters only
            return StepOutcome(local_norm, float(self.optimizer.param_groups[0]["lr"]) * lr_scale, False)
        scheduled = [group["lr"] for group in self.optimizer.param_groups]
        lr = apply_lr_scale(self.optimizer, lr_scale)
        skipped_before = self.engine.skipped_steps
        self.engine.step()
        reported = self.engine.get_global_grad_norm()
        grad_norm = float(reported) if reported is not None else local_norm
        applied = self.engine.skipped_steps == skipped_before
        if not applied:  # no scheduler step came to reset the scaled lr: undo the scale
            for group, value in zip(self.optimizer.param_groups, scheduled, strict=True):
                group["lr"] = value
        elif reported is not None and not math.isfinite(grad_norm):
            raise StrategyError(
                f"Expected DeepSpeed to skip a step whose gradient norm is {grad_norm}, but it applied it: the "
                "weights are no longer finite. Remove bf16.check_grad_overflow: false from strategy_config "
                "and resume from the last checkpoint."
            )
        return StepOutcome(grad_norm, float(lr), applied)


def _grad_norm(params: list[torch.nn.Parameter]) -> float:
    """ZeRO-0 reports no norm: the 2-norm of the gradients before clipping (summed over the ranks first)."""
    grads = [p.grad for p in params if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


ZERO_BUFFERS = (
    "single_partition_of_fp32_groups",  # ZeRO-1/2: this rank's fp32 masters
    "bit16_groups_flat",  # ZeRO-1/2: the low-precision weights, flat
    "fp32_partitioned_groups_flat",  # ZeRO-3: this rank's fp32 masters
    "fp16_partitioned_groups_flat",  # ZeRO-3: this rank's low-precision weight partition
)


def _zero_state_bytes(engine: Any) -> int:
    """Bytes of the ZeRO optimiser's weight buffers and optimiser state on this rank."""
    zero = engine.optimizer
    tensors = [
        t for name in ZERO_BUFFERS for t in getattr(zero, name, None) or () if isinstance(t, torch.Tensor)
    ]
    inner = getattr(zero, "optimizer", None)
    if isinstance(inner, torch.optim.Optimizer):
        tensors += list(optimizer_state_tensors(inner))
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


class DeepSpeedTrainStrategy:
    """Train backend on DeepSpeed (ZeRO stage, offload, bf16 from `strategy_config`, see `deepspeed_config`);
    AdamW, warm-up and clipping from `optimizer` (an `OptimizerSettings`, as hf_train); `data_parallel`: this
    process's rank of the role (see the module docstring); `share_prefix`: prefix-tree forwards as in
    `HFTrainStrategy`."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        optimizer: OptimizerSettings = OptimizerSettings(),
        seed: int = 0,
        trainable: bool = True,
        strategy_config: Mapping[str, Any] | None = None,
        data_parallel: DataParallelSpec | None = None,
        share_prefix: bool = False,
    ) -> None:
        if not trainable:
            raise StrategyError(
                "Expected trainable=True for deepspeed_train, got False; a frozen reference model uses "
                "strategy_name hf_train or hf_infer."
            )
        import deepspeed  # lazy: the deepspeed extra

        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.data_parallel = join_group(data_parallel, self.device, need_group=True)
        deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())
        self.ds_config = build_deepspeed_config(
            strategy_config or {},
            dtype=dtype,
            max_grad_norm=optimizer.max_grad_norm,
            world_size=self.data_parallel.size,
        )
        self.zero_stage = zero_stage(self.ds_config)
        # float32 master weights: DeepSpeed casts the module to bf16 itself when bf16 is enabled.
        model, self.tokenizer = load_model_and_tokenizer(model_path, device=device, dtype="float32")
        self.share_prefix = check_prefix_sharing(model, share_prefix, model_path)
        model.train()
        self.optimizer, self.scheduler = adamw_with_warmup(model.parameters(), optimizer)
        self.engine, *_ = deepspeed.initialize(
            model=model, optimizer=self.optimizer, lr_scheduler=self.scheduler, config=self.ds_config
        )
        self.model = self.engine.module
        self.gradients = DeepSpeedGradients(self.engine, self.optimizer, self.ds_config, self.data_parallel)
        self.step = 0  # train steps run, skipped non-finite ones included (the warm-up counts applied ones)
        self.nonfinite = self.gradients.nonfinite
        self.exporter = WeightExporter(self.model, gather=self._gather)
        self.offloaded = False

    def _gather(self, tensors: list[torch.Tensor]) -> AbstractContextManager[object]:
        """Whole parameters for reading (ZeRO-3 partitions them); a no-op below stage 3."""
        if self.zero_stage < 3:
            return nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(tensors, modifier_rank=None)

    @contextmanager
    def _full_weights(self) -> Iterator[dict[str, torch.Tensor]]:
        tensors = unique_named_tensors(self.model)
        with torch.no_grad(), self._gather(list(tensors.values())):
            yield tensors

    def partition_fraction(self) -> float:
        """The share of the model's parameter elements this rank holds (ZeRO-3: about 1 / ranks; else 1)."""
        params = list(self.model.parameters())
        if self.zero_stage < 3:
            return 1.0
        return sum(p.ds_tensor.numel() for p in params) / sum(p.ds_numel for p in params)

    def compute_log_probs(self, batch: Mapping[str, torch.Tensor], micro_batch_size: int) -> torch.Tensor:
        """[B, T] log-probs aligned with batch["input_ids"] (see `token_log_probs`), no grad, on CPU. Under
        ZeRO-3 with N ranks every rank calls it with as many micro-batches (checked: its forwards gather)."""
        if self.zero_stage == 3 and self.gradients.lockstep:
            forwards = -(-int(batch["input_ids"].shape[0]) // max(micro_batch_size, 1))
            self.data_parallel.check_same(forwards, "number of log-prob micro-batches")
        return batched_log_probs(
            self.engine, batch, micro_batch_size, device=self.device, share_prefix=self.share_prefix
        )

    def train_step(
        self,
        micro_batches: Sequence[MicroBatch],
        loss_fn: LossFn,
        *,
        with_entropy: bool,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """One optimiser step accumulated over `micro_batches` (see `HFTrainStrategy.train_step`); a
        non-finite loss or gradient norm skips it (see the module docstring)."""

        def loss_of(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
            share = bool(mb.get(SHARE_PREFIX_KEY, self.share_prefix)) and "response_mask" in mb
            if REFERENCE_KEY in mb or share:  # exact KL to the worker's frozen reference, or a prefix tree
                out = micro_batch_outputs(self.engine, mb, with_entropy=with_entropy, share_prefix=share)
                log_probs, entropy = out.log_probs, out.entropy
            else:
                log_probs, entropy = token_log_probs(
                    self.engine,
                    mb["input_ids"],
                    mb["attention_mask"],
                    with_entropy=with_entropy,
                    needed=mb.get("response_mask"),
                )
            loss, metrics = loss_fn(log_probs, entropy, mb)
            return loss, metrics, log_probs

        self.engine.train()
        result, applied = run_train_step(
            self.gradients, micro_batches, loss_of, lr_scale=lr_scale, device=self.device
        )
        self.step += 1
        if applied:
            self.exporter.bump()
        return result

    def offload_unavailable(self) -> str | None:
        """Why `offload` cannot run here (ZeRO-0: DeepSpeed has no offload_states for it), None when it can."""
        if callable(getattr(self.engine.optimizer, "offload_states", None)):
            return None
        return (
            f"DeepSpeed has no offload_states for ZeRO-{self.zero_stage} "
            f"({type(self.engine.optimizer).__name__}); use zero_optimization.stage 1-3"
        )

    def offload(self) -> OffloadReport:
        """DeepSpeed's own `engine.offload_states()` (ZeRO 1-3: fp32 masters, low-precision weights, gradient
        partitions and optimiser state to CPU memory, pinned from CUDA) until `reload`. `bytes_moved` is the size of
        those buffers on this rank. ZeRO-0 is refused (`offload_unavailable`)."""
        reason = self.offload_unavailable()
        if reason is not None:
            raise StrategyError(
                f"Expected a ZeRO stage DeepSpeed can offload, got: {reason}; or set offload_when_colocated: "
                "false on this role."
            )
        if self.offloaded:
            return OffloadReport(0.0, 0)
        started, before, size = (
            time.perf_counter(),
            allocated_bytes(self.device),
            _zero_state_bytes(self.engine),
        )
        self.engine.offload_states(pin_memory=self.device.type == "cuda")
        self.offloaded = True
        return OffloadReport(time.perf_counter() - started, size, before - allocated_bytes(self.device))

    def reload(self) -> OffloadReport:
        """Undo `offload` (`engine.reload_states()`)."""
        if not self.offloaded:
            return OffloadReport(0.0, 0)
        started, before = time.perf_counter(), allocated_bytes(self.device)
        self.engine.reload_states()
        self.offloaded = False
        size = _zero_state_bytes(self.engine)
        return OffloadReport(time.perf_counter() - started, size, before - allocated_bytes(self.device))

    def export_weights(self) -> dict[str, np.ndarray]:
        """CPU float32 numpy copies of all weights (tied ones once), gathered under ZeRO-3."""
        with self._full_weights() as tensors:
            return {n: t.detach().to("cpu", torch.float32).numpy().copy() for n, t in tensors.items()}

    # weight sync: the sending end, through `self.exporter` (see `sync.endpoints`)
    weights_fingerprint = endpoints.exported_fingerprint
    weight_sync_plan = endpoints.weight_sync_plan
    weight_bucket = endpoints.weight_bucket

    def save_checkpoint(self, path: Path) -> None:
        """DeepSpeed's own checkpoint (weights, optimizer, scheduler, step) under `path/deepspeed`, plus a
        Hugging Face model folder (safetensors + tokenizer) in `path` that inference strategies load."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.engine.save_checkpoint(
            str(path / DEEPSPEED_DIR),
            tag=DEEPSPEED_TAG,
            client_state={"step": self.step, "rng": torch.get_rng_state(), **self.nonfinite.state_dict()},
        )
        with self._full_weights() as tensors:  # a collective under ZeRO-3: every rank gathers
            state = {n: t.detach().to("cpu").clone() for n, t in tensors.items()}
        if self.data_parallel.is_main:
            self.model.save_pretrained(path, state_dict=state, safe_serialization=True)
            self.tokenizer.save_pretrained(path)
        self.data_parallel.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote: weights, optimizer and scheduler states, step, RNG."""
        folder = Path(path) / DEEPSPEED_DIR
        if not (folder / DEEPSPEED_TAG).is_dir():
            raise CheckpointError(
                f"Expected a DeepSpeed checkpoint at {folder / DEEPSPEED_TAG}, found none; pass a folder written "
                "by DeepSpeedTrainStrategy.save_checkpoint (an hf_train checkpoint loads with hf_train)."
            )
        loaded, client_state = self.engine.load_checkpoint(
            str(folder), tag=DEEPSPEED_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if loaded is None or client_state is None:
            raise CheckpointError(
                f"Expected DeepSpeed to load {folder}, it loaded nothing; the folder is incomplete."
            )
        self.step = int(client_state["step"])
        torch.set_rng_state(client_state["rng"])
        self.nonfinite.load_state_dict(client_state)
        self.exporter.bump()
