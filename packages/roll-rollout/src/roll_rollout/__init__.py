"""roll-rollout: Env managers, async rollout scheduler, policy clients and msgpack trajectories."""

__version__ = "0.1.0"
__all__: list[str] = ["__version__"]
