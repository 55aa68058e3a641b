"""roll-strategies: Training and inference backends (HF, DeepSpeed, vLLM) and weight sync."""

__version__ = "0.1.0"
__all__: list[str] = ["__version__"]
