"""Launch the agentic pipeline from a YAML config, as in the upstream docs.

    python examples/start_agentic_pipeline.py --config_path tiny-cpu-agentic --config_name agent_val_frozen_lake
    python examples/start_agentic_pipeline.py --config-path tiny-cpu-agentic --config-name agent_val_frozen_lake \
        exp_name=my_run seed=123

`--config_path` is looked up relative to the current folder first, then to this examples/ folder.
Same as `roll train` with the same arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

from roll_pipeline.cli import args as cli_args
from roll_pipeline.cli import commands as cli

if __name__ == "__main__":
    cli_args.EXAMPLES_DIR = Path(__file__).resolve().parent
    sys.exit(cli.train(sys.argv[1:]))
