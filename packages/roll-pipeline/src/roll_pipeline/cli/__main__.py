"""`python -m roll_pipeline.cli ...` is the `roll` command (`roll sweep` runs each seed this way)."""

import sys

from roll_pipeline.cli.commands import main

if __name__ == "__main__":  # importing this module (pkgutil.walk_packages does) runs nothing
    sys.exit(main())
