"""The role workers the pipeline runs (wrapped with `ray.remote` at its call site), and the process they own.

- `roles.py`: `ActorTrainWorker`, `ActorInferWorker`, `ReferenceWorker`, `CriticWorker`: each picks its strategy by name.
- `base.py`: `RoleWorker`, what every role's worker does alike (its process, its strategy by name), and the
  methods several roles share.
- `allocator.py`: glibc's malloc set to give freed tensors back to the OS (`configure_allocator`, `release_freed_memory`).
"""
