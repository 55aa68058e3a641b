"""The run's configuration: `schema.py` (AgenticConfig), `run.py` and `algorithm.py` (the run's and the algorithm's
flat keys, which AgenticConfig inherits), `roles.py` (each role's model, training, generating and strategy
arguments), `envs.py` (env tags and their managers), `checks.py` (cross-field checks, refused; the roles' own in
`role_checks.py`), `contradictions.py` (settings that work against each other, warned), `compose.py` (Hydra YAML +
overrides -> AgenticConfig), `strategies.py` (each role's backend checked against the registry), `colocation.py`
(which roles share GPUs, vLLM sleep), `tiny_recipe.py` (the builtin tiny models' recipe). The checks before
anything starts (envs, models, checkpoints) are `roll_pipeline.preflight`, a floor above."""
