"""Training: the train strategies, the step loop they share, and what they are built from.

- `hf_train.py`: `HFTrainStrategy`, a Hugging Face causal LM trained on the CPU or one GPU (or frozen: the reference).
- `critic.py`: `HFCriticStrategy` (`hf_critic`), the PPO critic: a value model with its own optimiser.
- `checkpoints.py`: the checkpoint folder both hf strategies write and read (`write_checkpoint`, `read_checkpoint`).
- `deepspeed_train.py`: `DeepSpeedTrainStrategy` (`deepspeed_train`), the causal LM under DeepSpeed ZeRO 0-3.
- `deepspeed_config.py`: `build_deepspeed_config`, a role's `strategy_config` turned into DeepSpeed's (pure).
- `optimizer.py`: `OptimizerSettings`, the AdamW / warm-up / clipping arguments every train strategy takes.
- `train_loop.py`: `run_train_step`, the accumulate / step loop of every train strategy over a `GradientBackend`.
- `master_weights.py`: `MasterWeightOptimizer`, the hf strategies' gradient backend (fp32 masters, AdamW, clipping).
- `offload.py`: `OffloadReport`, `offload_tensors` / `reload_tensors`: a trainer's state off its GPU while vLLM samples.
- `schedules.py`: AdamW with linear warm-up, and the run's learning-rate decay factors.
- `value_model.py`: `load_value_model`, the policy's architecture with a scalar value head, for the critic.
- `data_parallel.py`: `DataParallelSpec`, `join_group`, `DataParallel`: a trained role as N ranks in one group.
"""
