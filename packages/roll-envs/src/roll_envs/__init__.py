"""roll-envs: Gym-like text environments SDK for training LLM agents (no torch, no Ray)."""

__version__ = "0.1.0"
__all__: list[str] = ["__version__"]
