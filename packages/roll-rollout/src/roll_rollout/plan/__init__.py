"""What a rollout plays where: `layout.py` (`EnvLayout`: which env slots form which group, with which tag,
on which worker; `TagMix`; `envs_per_worker`) and `seeds.py` (the training and validation seed streams, the
scheduler's `SeedStream`, and `sample_key`, the random stream of one turn's sampling, which the env slots
read)."""
