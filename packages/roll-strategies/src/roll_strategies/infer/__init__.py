"""Inference: the sampling strategies and what they share.

- `hf_infer.py`: `HFInferStrategy`, batched sampling with Hugging Face `generate`.
- `vllm_infer.py`: `VLLMInferStrategy` (`vllm`), sampling on vLLM's async engine, continuously batched.
- `vllm_worker.py`: `RollWorkerExtension`, the code run inside vLLM's worker processes (weights loaded in place).
- `turn_cache.py`: `TurnCache`, the keys and values of earlier calls' sequences, so an episode's next turn encodes
  only the ids it adds.
- `sampling.py`: keyed sampling: a row's tokens depend on its own key and logits, never on its batch.
- `sleep.py`: vLLM's sleep levels (the one table of them) and why an engine cannot sleep here.
"""
