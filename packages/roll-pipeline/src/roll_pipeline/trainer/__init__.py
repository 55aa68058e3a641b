"""One training step, in its order: `samples.py` (trajectories -> step or trajectory rows), `experience.py`
(old and reference log-probs, values, KL penalty, advantages), `kl_control.py` (the KL coefficients),
`micro_batches.py` (fixed, dynamic or packed micro-batches; their index plans in `micro_plan.py`), `epochs.py` (the epochs x mini-batches loop),
`critic_update.py`, `actor_update.py`, `weight_update.py` (train -> infer weight sync); `demonstration.py` (the
demonstration steps as one phase: rollout, experience, sft loss, rate). They take small settings, never the run's
whole configuration (`roll_pipeline.assembly.settings` translates it once). The losses
themselves are `roll_algos.objectives`."""
