"""The run's configuration: `schema.py` (AgenticConfig), `roles.py` (each role's model, training, generating and
strategy arguments), `checks.py` (cross-field checks), `compose.py` (Hydra YAML + overrides -> AgenticConfig),
`preflight.py` (what is checked before anything starts: envs, models, strategies, checkpoints)."""
