"""`roll migrate`: a ROLL agentic config (alibaba/ROLL) translated into a roll config, key by key, with a report
of every key translated, converted, set from ROLL's defaults, dropped, approximated or unsupported.

Modules: `load.py` (ROLL's Hydra defaults and interpolations), `convert.py` (value converters), `algo.py` /
`handlers.py` / `envs.py` (settings that span several keys), `translate.py` (the walk: `migrate_file`, `to_yaml`),
`report.py` (`MigrationReport`, `MigrationError`). The translation table itself (`roll_keys.rules`) and the
detection of a ROLL file (`roll_keys.detect`) live on the lowest floor, where `config` reads them too.
docs/migrating_from_roll.md explains what maps and what does not.
"""
