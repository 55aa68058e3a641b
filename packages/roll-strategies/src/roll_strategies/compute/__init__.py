"""What a model computes on rows of token ids, aligned with `input_ids`, for the train and infer strategies.

- `forward.py`: per-token outputs at the response positions, padded or packed: log-probs, entropy, exact KL, values.
- `logprobs.py`: `token_log_probs` and the vocabulary-chunked LM head under every causal-LM forward.
"""
