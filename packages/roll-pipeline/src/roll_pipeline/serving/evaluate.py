"""`roll eval`: a policy on the config's validation envs, fixed held-out seeds, greedy decoding.

The policy is the config's model, a checkpoint of a run, or any OpenAI-compatible server. Episodes
run exactly as the training run's validation does (the same val env manager, seeds and sampling), so
evaluating a run's checkpoint reproduces the validation figure it logged at that step. Env workers
and the HF model live in this process (no Ray needed).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from roll_rollout import PolicyClient, RolloutBatch, validation_seeds

from roll_pipeline.assembly.parts import inference_server
from roll_pipeline.assembly.settings import config_model, rollout_settings, run_settings
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.metrics import episodes_by_tag, val_metrics
from roll_pipeline.runtime.cluster import LocalCluster
from roll_pipeline.runtime.rollout import build_scheduler
from roll_pipeline.state.checkpoint import CheckpointManager, newest_verified, verify_checkpoint


@dataclass(frozen=True)
class TagReport:
    """What the policy did on one tag's validation episodes."""

    tag: str
    episodes: int
    success: float  # over every episode, failed ones counted as failures
    mean_return: float  # healthy episodes
    mean_turns: float
    valid_actions: float  # fraction of turns whose answer the env could parse
    failed_episodes: int


def tag_reports(batch: RolloutBatch) -> list[TagReport]:
    """Per-tag summary of a validation batch."""
    reports = []
    for tag, (trajs, failed) in episodes_by_tag(batch.trajectories, batch.failed).items():
        turns = [turn for t in trajs for turn in t.turns]
        n = len(trajs) + failed
        reports.append(
            TagReport(
                tag,
                n,
                sum(t.success for t in trajs) / n,
                sum(t.score for t in trajs) / max(len(trajs), 1),
                len(turns) / max(len(trajs), 1),
                sum(turn.action_is_valid for turn in turns) / max(len(turns), 1),
                failed,
            )
        )
    return reports


def format_table(reports: list[TagReport]) -> str:
    """A markdown table of tag reports."""
    lines = [
        "| tag | episodes | success | mean return | mean turns | valid actions | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        lines.append(
            f"| {r.tag} | {r.episodes} | {r.success:.3f} | {r.mean_return:.3f} | {r.mean_turns:.2f} | "
            f"{r.valid_actions:.3f} | {r.failed_episodes} |"
        )
    return "\n".join(lines)


def checkpoint_model_dir(path: Path) -> Path:
    """The model folder of a checkpoint, given the checkpoint, its run's checkpoints/ or the run folder."""
    path = Path(path)
    for root in (path, path / "checkpoints"):
        if (root / "latest").exists() or any(root.glob("checkpoint-*")):
            found = newest_verified(root)
            if found is None:
                raise FileNotFoundError(f"no checkpoint under {root} verifies against its manifest")
            return CheckpointManager.model_dir(found)
    verify_checkpoint(path)
    return CheckpointManager.model_dir(path)


async def evaluate(
    config: AgenticConfig,
    tokenizer: Any,
    policy: PolicyClient,
    episodes: int | None = None,
    progress: bool = False,
) -> RolloutBatch:
    """Play `episodes` validation episodes (default `val_rollout_batch_size`; fixed held-out seeds, so the
    first `val_rollout_batch_size` are exactly the training run's validation) with `policy`."""
    cluster = LocalCluster()
    scheduler = build_scheduler(
        rollout_settings(config),
        config.val_env_manager,
        cluster,
        tokenizer,
        policy,
        validation=True,
        seed=config.seed + 1,
        name="eval",
    )
    layout = scheduler.layout
    total = config.val_rollout_batch_size if episodes is None else episodes
    if total <= 0 or total % layout.group_size:
        raise ValueError(f"episodes must be a positive multiple of the val group size {layout.group_size}")
    seeds = validation_seeds(total // layout.group_size)
    chunk = layout.num_env_groups  # groups per get_batch: every val env slot busy
    from tqdm.auto import tqdm

    batch = RolloutBatch([])
    try:
        with tqdm(total=total, desc="episodes", unit="ep", disable=not progress, dynamic_ncols=True) as bar:
            for start in range(0, len(seeds), chunk):
                part = await scheduler.get_batch(
                    min(chunk, len(seeds) - start) * layout.group_size, seeds=seeds[start : start + chunk]
                )
                batch.trajectories += part.trajectories
                batch.failed += part.failed
                bar.update(len(part.trajectories) + len(part.failed))
        return batch
    finally:
        await scheduler.stop()
        cluster.shutdown()


def run_eval(
    config: AgenticConfig,
    model_dir: Path | str | None,
    policy: PolicyClient | None = None,
    *,
    episodes: int | None = None,
    progress: bool = False,
    dump: Path | None = None,
) -> dict[str, Any]:
    """Evaluate the HF model in `model_dir` (default: the config's) or `policy`; the JSON-able result.
    With `dump`, the episodes are also written there (`roll_pipeline.observe.transcripts`)."""
    from transformers import AutoTokenizer

    model = model_dir or config_model(config)
    tokenizer = AutoTokenizer.from_pretrained(model)
    server = None
    if policy is None:
        server = inference_server(run_settings(config), model)
        policy = server.policy
    batch = asyncio.run(evaluate(config, tokenizer, policy, episodes, progress))
    if dump is not None:
        from roll_pipeline.observe.transcripts import write_dump

        played = sorted([*batch.trajectories, *batch.failed], key=lambda t: (t.tag, t.seed, t.env_id))
        write_dump(played, dump)
    reports = tag_reports(batch)
    return {
        "model": str(model),
        "policy": "hf" if server is not None else type(policy).__name__,
        "episodes": len(batch) + len(batch.failed),
        "tags": [asdict(r) for r in reports],
        "metrics": val_metrics(batch),
    }


def write_json(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2), encoding="utf-8")
