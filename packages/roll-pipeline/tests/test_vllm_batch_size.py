"""actor_infer.infer_batch_size with vllm becomes vLLM's max_num_seqs, or the config is refused when
strategy_config names another max_num_seqs (vllm itself is not needed: a fake worker stands at the seam)."""

from __future__ import annotations

from typing import Any

import pytest
import roll_strategies
from roll_pipeline.config.compose import ConfigError, compose
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_strategies.infer.vllm_infer import with_max_num_seqs

VLLM = ["actor_infer.strategy_args.strategy_name=vllm", "recompute_old_log_probs=true"]


class RecordingWorker:
    """Stands in for `ActorInferWorker`: keeps the strategy_config it was given."""

    def __init__(self, model_path: Any, *, strategy_config: Any = None, **kwargs: Any) -> None:
        self.strategy_config = strategy_config

    def streams(self) -> bool:
        return True


def test_infer_batch_size_becomes_max_num_seqs_unless_the_config_names_one():
    assert with_max_num_seqs(None, 48) == {"max_num_seqs": 48}
    assert with_max_num_seqs({"max_num_seqs": 64, "enforce_eager": True}, 48) == {
        "max_num_seqs": 64,
        "enforce_eager": True,
    }


@pytest.mark.parametrize(("name", "expected"), [("vllm", {"max_num_seqs": 24}), ("hf_infer", None)])
def test_the_policy_server_hands_vllm_its_batch_size(monkeypatch, name, expected):
    monkeypatch.setattr(roll_strategies, "ActorInferWorker", RecordingWorker)
    server = PolicyServer("unused", max_batch_size=24, strategy_name=name)
    assert server.worker.strategy_config == expected  # type: ignore[attr-defined]


def test_a_batch_size_disagreeing_with_max_num_seqs_is_refused():
    both = [
        *VLLM,
        "actor_infer.infer_batch_size=16",
        "+actor_infer.strategy_args.strategy_config={max_num_seqs: 64}",
    ]
    with pytest.raises(ConfigError, match=r"infer_batch_size=16 and .*max_num_seqs=64 disagree"):
        compose(None, None, both)
    equal = [
        *VLLM,
        "actor_infer.infer_batch_size=64",
        "+actor_infer.strategy_args.strategy_config={max_num_seqs: 64}",
    ]
    assert compose(None, None, equal).actor_infer.infer_batch_size == 64
    # the recipe's batch size is not the user's: the config's max_num_seqs then stands alone
    only_seqs = [*VLLM, "+actor_infer.strategy_args.strategy_config={max_num_seqs: 64}"]
    assert compose(None, None, only_seqs).actor_infer.strategy_args.strategy_config["max_num_seqs"] == 64
    hf = ["actor_infer.infer_batch_size=16"]  # hf_infer batches by infer_batch_size itself
    assert compose(None, None, hf).actor_infer.infer_batch_size == 16
