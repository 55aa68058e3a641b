"""roll-pipeline: the agentic RL pipeline — config, orchestration, logging, checkpoints, CLI."""

from roll_pipeline.config.compose import ConfigError, tiny_config
from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.summary import RunSummary
from roll_pipeline.pipeline import AgenticPipeline
from roll_pipeline.preflight import compose
from roll_pipeline.runtime.cluster import ClusterError
from roll_pipeline.state.checkpoint import CheckpointError, CheckpointManager

__version__ = "0.4.0"

__all__ = [
    "AgenticConfig",  # the validated run configuration (pydantic, unknown keys rejected)
    "AgenticPipeline",  # AgenticPipeline(config).run() -> RunSummary
    "CheckpointError",  # a checkpoint folder is missing, incomplete or damaged (names the file)
    "CheckpointManager",  # atomic checkpoints under run_dir/checkpoints
    "ClusterError",  # the cluster cannot host the run: Ray missing, unshared storage (names the node), CPUs
    "ConfigError",  # a config file or override is wrong (message names the key and the fix)
    "RunSummary",  # steps, wall time, validation history, last checkpoint
    "__version__",
    "compose",  # Hydra compose (YAML + overrides) -> AgenticConfig
    "tiny_config",  # tiny_config(**overrides): the builtin tiny model's recipe (`roll train` with no config)
]
