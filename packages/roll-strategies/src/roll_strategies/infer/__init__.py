"""Inference: the sampling strategies and what they share.

- `hf_infer.py`: `HFInferStrategy`, batched sampling with Hugging Face `generate`.
- `slot_decode.py`: `SlotDecoder`, hf_infer's static-cache decoding (`decode="static"`): fixed-shape decode steps
  over slots refilled as sequences finish.
- `slot_cache.py`: `SlotKVCache`, the slots' static key/value buffers, and the visibility mask of each query.
- `vllm_infer.py`: `VLLMInferStrategy` (`vllm`), sampling on vLLM's async engine, continuously batched.
- `vllm_engine.py`: what the vllm strategy prepares for its engine (`engine_kwargs`, `with_max_num_seqs`, the
  checkpoint's tensor shapes, the whole-layer chunks of each weight-loading RPC).
- `vllm_worker.py`: `RollWorkerExtension`, the code run inside vLLM's worker processes (weights loaded in place).
- `turn_cache.py`: `TurnCache`, the keys and values of earlier calls' sequences, so an episode's next turn encodes
  only the ids it adds.
- `sampling.py`: keyed sampling: a row's tokens depend on its own key and logits, never on its batch.
- `sleep.py`: vLLM's sleep levels (the one table of them) and why an engine cannot sleep here.
"""
