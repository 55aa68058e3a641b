"""What a model computes on rows of token ids, aligned with `input_ids`, for the train and infer strategies.

- `forward.py`: per-token outputs at the response positions, padded, packed or as a prefix tree: log-probs, entropy,
  exact KL, values.
- `prefix_tree.py`: the trie of a micro-batch's rows, flattened into one sequence with a 4D ancestor mask.
- `layout_cost.py`: whether that tree costs less than the padded or packed rows (tokens and attention pairs).
- `logprobs.py`: `token_log_probs` and the vocabulary-chunked LM head under every causal-LM forward.
"""
