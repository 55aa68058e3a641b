"""roll-pipeline: the agentic RL pipeline — config, orchestration, logging, checkpoints, CLI."""

from roll_pipeline.checkpoint import CheckpointError, CheckpointManager
from roll_pipeline.config import AgenticConfig
from roll_pipeline.launcher import ConfigError, compose
from roll_pipeline.pipeline import AgenticPipeline, RunSummary

__version__ = "0.2.2"

__all__ = [
    "AgenticConfig",  # the validated run configuration (pydantic, unknown keys rejected)
    "AgenticPipeline",  # AgenticPipeline(config).run() -> RunSummary
    "CheckpointError",  # a checkpoint folder is missing, incomplete or damaged (names the file)
    "CheckpointManager",  # atomic checkpoints under run_dir/checkpoints
    "ConfigError",  # a config file or override is wrong (message names the key and the fix)
    "RunSummary",  # steps, wall time, validation history, last checkpoint
    "__version__",
    "compose",  # Hydra compose (YAML + overrides) -> AgenticConfig
]
