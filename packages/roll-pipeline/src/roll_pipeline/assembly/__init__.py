"""A run's parts, built from its config once, for the pipeline and the serving commands alike: `settings.py`
(the one place the run's whole configuration becomes the small settings each component takes), `roles.py` (one
`RolePlan` per role: devices, GPUs, ranks, CPUs, threads, backend, optimizer; the model folder), `parts.py`
(`assemble`: model, cluster, checkpoints, tracker, workers, rollouts and the step's components; the inference
server of `roll eval` / `roll serve`)."""
