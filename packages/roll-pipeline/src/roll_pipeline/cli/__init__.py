"""The `roll` command line: `commands.py` dispatches train / config / sweep / plot / baselines, `play.py` the
commands that play or serve a model (eval / rollout / show / serve), `migrate.py` `roll migrate`, `args.py` what
they share, `__main__.py` `python -m roll_pipeline.cli`."""

from roll_pipeline.cli.commands import main

__all__ = ["main"]
