"""roll-algos: RL maths for LLM agents: advantages, losses, KL, packing, dynamic batching."""

__version__ = "0.1.0"
__all__: list[str] = ["__version__"]
