"""`model_args.dtype: auto` becomes one concrete dtype per role before any part of a run reads it, each
choice logged with why (the probe is monkeypatched: the rates of an emulating and of an AMX CPU)."""

from __future__ import annotations

import pytest
import torch
from roll_pipeline.assembly.settings import concrete_dtypes
from roll_pipeline.config.compose import compose
from roll_pipeline.config.contradictions import config_warnings
from roll_strategies.models import _loading

AUTO = [f"{role}.model_args.dtype=auto" for role in ("actor_train", "actor_infer", "reference")]


def _rates(monkeypatch: pytest.MonkeyPatch, bf16: float, fp32: float = 160.0) -> None:
    rates = {torch.bfloat16: bf16, torch.float32: fp32}
    monkeypatch.setattr(_loading, "cpu_matmul_rate", lambda dtype, size=256: rates[dtype])


@pytest.mark.parametrize(("bf16", "expected"), [(0.29, "float32"), (214.0, "bfloat16")])
def test_auto_is_replaced_on_every_cpu_role_and_logged_once(monkeypatch, bf16, expected):
    _rates(monkeypatch, bf16)
    lines: list[str] = []
    config = concrete_dtypes(compose(None, None, AUTO), lines.append)
    assert [getattr(config, r).model_args.dtype for r in ("actor_train", "actor_infer", "reference")] == [
        expected
    ] * 3
    (line,) = lines
    assert line.startswith(
        f"[roll] model_args.dtype auto -> {expected} for actor_train, actor_infer, reference"
    )
    assert f"bfloat16 matmuls at {bf16:.2f} GFLOP/s" in line


def test_a_config_without_auto_is_returned_as_it_is(monkeypatch):
    monkeypatch.setattr(_loading, "cpu_matmul_rate", lambda dtype, size=256: pytest.fail("measured"))
    config = compose(None, None, [])
    assert concrete_dtypes(config, pytest.fail) is config


def test_auto_sampling_asynchronous_without_recompute_is_warned():
    (warning,) = config_warnings(
        compose(None, None, ["actor_infer.model_args.dtype=auto", "async_generation_ratio=1"])
    )
    assert "actor_infer samples in auto (bfloat16 where the device computes it natively)" in warning
