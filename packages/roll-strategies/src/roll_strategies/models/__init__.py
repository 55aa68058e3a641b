"""Model folders: loading them, and building the offline ones the project trains and tests with.

- `_loading.py`: `load_model_and_tokenizer` of a local folder (project errors instead of hub lookups), `resolve_dtype`,
  `choose_dtype` (what `dtype: auto` loads on a device: bfloat16 where it is native, float32 where emulated),
  `warn_slow_cpu_dtype` (a half precision the CPU computes at least 4x slower than float32 is logged at load).
- `tiny_model.py`: `build_tiny_model`, the project's tiny offline Qwen2 model, with an optional format warm-up.
- `tiny_tokenizer.py`: `build_tiny_tokenizer`, the deterministic byte-level BPE tokenizer that behaves word-level.
- `qwen_shaped.py`: a folder shaped like Qwen2.5-0.5B-Instruct (random weights), built offline.
- `gguf.py`: `ensure_model_folder`, a GGUF checkpoint converted once into a cached Hugging Face folder.
"""
