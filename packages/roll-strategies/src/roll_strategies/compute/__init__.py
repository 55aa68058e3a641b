"""What a model computes on rows of token ids, aligned with `input_ids`, for the train and infer strategies.

- `forward.py`: per-token outputs at the response positions, padded, packed or as a prefix tree: log-probs, entropy,
  exact KL, values.
- `layout.py`: where a micro-batch's rows run in that forward (padded, packed or a prefix tree) and where each
  response position is predicted.
- `prefix_tree.py`: the trie of a micro-batch's rows, a batch row per root's subtree, with 4D ancestor masks
  (one per attention window).
- `layout_cost.py`: whether that tree costs less than the padded or packed rows (tokens and attention pairs).
- `attention_windows.py`: how far back each layer type of a model attends (its sliding windows), from its config.
- `probes.py`: whether a model honours the packed and the prefix-tree layouts (`packing_supported`,
  `prefix_sharing_supported`), and a strategy's refusal of `share_prefix` where it does not (`check_prefix_sharing`).
- `logprobs.py`: `token_log_probs` and the vocabulary-chunked LM head under every causal-LM forward.
"""
