"""ROLL's keys, as data, for every floor that meets them: `rules.py` (the ROLL -> roll translation table, one
`Rule` per ROLL key path), `upstream.py` (what ROLL itself has: its fields, backends, env types and their
defaults), `hints.py` (roll's name for a ROLL key, for the errors of `roll config`), `detect.py`
(whether a YAML file is a ROLL config). The lowest floor of roll_pipeline: it imports nothing of roll's, so
`config` names roll's key for a ROLL one and `migrate` translates with the same table."""
