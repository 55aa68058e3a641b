"""The `roll` command line: `commands.py` dispatches train / config / sweep / plot / baselines, `play.py` the
commands that play or serve a model (eval / rollout / show / serve), `args.py` what they share."""

from roll_pipeline.cli.commands import main

__all__ = ["main"]
