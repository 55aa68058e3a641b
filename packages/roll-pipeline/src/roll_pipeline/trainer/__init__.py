"""One training step, in its order: `samples.py` (trajectories -> step or trajectory rows), `experience.py`
(old and reference log-probs, values, KL penalty, advantages), `kl_control.py` (the KL coefficients),
`micro_batches.py` (fixed, dynamic or packed micro-batches), `epochs.py` (the epochs x mini-batches loop),
`critic_update.py`, `actor_update.py`, `weight_update.py` (train -> infer weight sync). `settings.py` is the
one place the run's whole configuration becomes the small settings these components take. The losses
themselves are `roll_algos.objectives`."""
