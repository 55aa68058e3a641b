"""roll-pipeline: The agentic RL pipeline: config, orchestration, logging, checkpoints, CLI."""

__version__ = "0.1.0"
__all__: list[str] = ["__version__"]
