"""`roll migrate`: a ROLL agentic config (alibaba/ROLL) translated into a roll config, key by key, with a report
of every key translated, converted, set from ROLL's defaults, dropped, approximated or unsupported.

Modules: `rules.py` (the translation table, as data), `load.py` (ROLL's Hydra defaults and interpolations),
`convert.py` (value converters), `algo.py` / `handlers.py` / `envs.py` (settings that span several keys),
`translate.py` (the walk: `migrate_file`, `to_yaml`), `report.py` (`MigrationReport`, `MigrationError`),
`detect.py` (whether a YAML file is a ROLL config). docs/migrating_from_roll.md explains what maps and what does not.
This package imports nothing at import time, so `config.compose` can read `rules.hint_for` without a cycle.
"""
