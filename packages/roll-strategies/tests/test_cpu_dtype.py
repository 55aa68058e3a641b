"""A half precision the CPU computes slowly is reported at model load, with the fix."""

from __future__ import annotations

import logging
import time

import pytest
import torch
from roll_strategies.errors import StrategyError
from roll_strategies.models import _loading
from roll_strategies.models._loading import (
    choose_dtype,
    cpu_matmul_rate,
    load_model_and_tokenizer,
    warn_slow_cpu_dtype,
)


def _rates(monkeypatch: pytest.MonkeyPatch, rates: dict[torch.dtype, float]) -> None:
    monkeypatch.setattr(_loading, "cpu_matmul_rate", lambda dtype, size=256: rates[dtype])


def test_a_slow_half_precision_is_reported_with_the_fix(monkeypatch, caplog):
    # the rates of a 2-core AMD EPYC (Zen 3, no avx512_bf16) at 256^3
    _rates(monkeypatch, {torch.bfloat16: 0.29, torch.float32: 160.0})
    with caplog.at_level(logging.WARNING, logger=_loading.__name__):
        assert warn_slow_cpu_dtype(torch.bfloat16)
    assert "bfloat16" in caplog.text and "552x slower" in caplog.text and "dtype to float32" in caplog.text


def test_a_fast_half_precision_and_float32_are_not_reported(monkeypatch, caplog):
    # an AMX CPU: bfloat16 faster than float32; and just under the factor
    for half in (214.0, 160.0 / _loading.SLOW_DTYPE_FACTOR + 0.01):
        _rates(monkeypatch, {torch.bfloat16: half, torch.float16: half, torch.float32: 160.0})
        with caplog.at_level(logging.WARNING, logger=_loading.__name__):
            assert not warn_slow_cpu_dtype(torch.bfloat16)
            assert not warn_slow_cpu_dtype(torch.float16)
            assert not warn_slow_cpu_dtype(torch.float32)
    assert caplog.text == ""


def test_loading_in_bfloat16_on_a_slow_cpu_warns(monkeypatch, caplog, tiny_model_dir):
    _rates(monkeypatch, {torch.bfloat16: 0.29, torch.float32: 160.0})
    with caplog.at_level(logging.WARNING, logger=_loading.__name__):
        model, _ = load_model_and_tokenizer(tiny_model_dir, device="cpu", dtype="bf16")
    assert model.dtype == torch.bfloat16  # the dtype asked for is still what loads
    assert "set this role's model_args.dtype to float32" in caplog.text


def test_the_rate_is_measured():
    assert cpu_matmul_rate(torch.float32, size=64) > 0


def test_time_off_the_core_does_not_enter_the_rate(monkeypatch):
    # what a second process on the cores does to the probe: its thread waits, descheduled, mid-measurement
    # (wall-clock on every thread measured float32 at 2.8 GFLOP/s and bfloat16 at 4.2 beside a second run
    # starting, 80 and 175 in one thread, so dtype auto chose by chance)
    measure = cpu_matmul_rate.__wrapped__
    on_the_core = measure(torch.float32, size=256)
    matmul = torch.matmul

    def descheduled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        time.sleep(0.002)
        return matmul(a, b)

    monkeypatch.setattr(torch, "matmul", descheduled)
    assert measure(torch.float32, size=256) > 0.5 * on_the_core


def test_the_measurement_leaves_the_thread_count_as_it_was():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the probe itself runs in one
    try:
        cpu_matmul_rate.__wrapped__(torch.float32, size=32)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_auto_picks_float32_where_the_cpu_emulates_bfloat16(monkeypatch):
    _rates(monkeypatch, {torch.bfloat16: 0.29, torch.float32: 160.0})  # AMD EPYC Zen 3
    dtype, why = choose_dtype("auto", "cpu")
    assert dtype == "float32"
    assert "0.29 GFLOP/s" in why and "160.0" in why


def test_auto_picks_bfloat16_where_the_cpu_computes_it_at_least_as_fast(monkeypatch):
    for half in (160.0, 214.0):  # equal, and an AMX CPU
        _rates(monkeypatch, {torch.bfloat16: half, torch.float32: 160.0})
        assert choose_dtype("auto", "cpu")[0] == "bfloat16"
    _rates(monkeypatch, {torch.bfloat16: 159.0, torch.float32: 160.0})
    assert choose_dtype("auto", "cpu")[0] == "float32"


def test_auto_on_cuda_follows_the_device_capability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability, expected in (((9, 0), "bfloat16"), ((8, 0), "bfloat16"), ((7, 5), "float32")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert choose_dtype("auto", "cuda:0")[0] == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(StrategyError, match=r"set model_args\.dtype to bfloat16 or float32"):
        choose_dtype("auto", "cuda")


def test_a_named_dtype_is_kept_without_measuring(monkeypatch):
    monkeypatch.setattr(_loading, "cpu_matmul_rate", lambda dtype, size=256: pytest.fail("measured"))
    assert choose_dtype("bfloat16", "cpu") == ("bfloat16", "as configured")
