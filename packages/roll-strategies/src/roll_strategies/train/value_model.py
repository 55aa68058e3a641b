"""The critic's model: the policy's architecture and backbone weights with a scalar value head.

`load_value_model` reads the same local model folder as the actor (a causal LM) into
`AutoModelForTokenClassification` with one label: the transformer body keeps the pretrained weights,
the LM head is dropped and a linear `score` head (hidden -> 1) is added, zero-initialised so every
value starts at 0. Its dropout is off: a value head's noise would go straight into the advantages.
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import (
    AutoConfig,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from roll_strategies.errors import ModelNotFoundError
from roll_strategies.models._loading import resolve_dtype

__all__ = ["load_value_model"]


def load_value_model(
    model_path: str | Path, *, device: str, dtype: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(value model, tokenizer) from a local causal-LM folder or a critic checkpoint; never the hub.

    A folder saved by `HFCriticStrategy.save_checkpoint` (a token-classification model) keeps its head;
    a causal-LM folder gets a fresh, zero-initialised one.
    """
    path = Path(model_path)
    if not path.is_dir() or not (path / "config.json").exists():
        raise ModelNotFoundError(path, "no such folder" if not path.is_dir() else "config.json missing")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    transformers_logger = logging.getLogger("transformers.modeling_utils")
    level = transformers_logger.level
    transformers_logger.setLevel(logging.ERROR)  # "some weights were newly initialised": the head, on purpose
    try:
        config = AutoConfig.from_pretrained(path, num_labels=1, local_files_only=True)
        config.classifier_dropout = 0.0
        model = AutoModelForTokenClassification.from_pretrained(
            path, config=config, dtype=resolve_dtype(dtype), local_files_only=True
        )
    finally:
        transformers_logger.setLevel(level)
    if not _is_critic_folder(path):
        model.score.weight.data.zero_()
        if model.score.bias is not None:
            model.score.bias.data.zero_()
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device), tokenizer


def _is_critic_folder(path: Path) -> bool:
    import json

    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    return any(str(a).endswith("ForTokenClassification") for a in config.get("architectures") or [])
