"""A run's parts, built from its config once, for the pipeline and the serving commands alike: `settings.py`
(`run_settings`: the one translation of the run's whole configuration, a frozen `RunSettings` of the small
settings each component takes), `parts.py` (`assemble` -> `RunParts`: model, cluster, checkpoints, tracker,
workers from their plans (`runtime.placement`), rollouts and the step's components; the inference server of
`roll eval` / `roll serve`)."""
