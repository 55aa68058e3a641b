"""`roll config`'s share_prefix check on a sliding-window architecture: a small random instance with its
window shrunk goes through the strategies' probe, rows past the window; a refusal names the layers."""

from __future__ import annotations

import pytest
import roll_strategies.compute.probes as probes
from roll_pipeline.models.model_checks import _probe_architecture, check_share_prefix
from transformers import Gemma3TextConfig


@pytest.fixture
def gemma3_folder(tmp_path):
    """A Gemma3-shaped config.json (sliding and full layers, a 4096-token window), no weights."""
    config = Gemma3TextConfig(
        num_hidden_layers=2,
        sliding_window=4096,
        layer_types=["sliding_attention", "full_attention"],
        architectures=["Gemma3ForCausalLM"],
    )
    config.save_pretrained(tmp_path)
    _probe_architecture.cache_clear()
    yield str(tmp_path)
    _probe_architecture.cache_clear()


def test_a_windowed_architecture_is_probed_past_a_shrunk_window(gemma3_folder):
    assert check_share_prefix(True, gemma3_folder) == []
    name, ok, layers = _probe_architecture(gemma3_folder, 0)
    assert (name, ok) == ("Gemma3ForCausalLM", True)
    assert layers == (
        "layers 0 (sliding_attention) attend to a window of 8 tokens; "
        "layers 1 (full_attention) attend to all previous tokens"
    )


def test_a_refused_architecture_names_its_layers(gemma3_folder, monkeypatch):
    monkeypatch.setattr(probes, "prefix_sharing_supported", lambda model: False)
    (problem,) = check_share_prefix(True, gemma3_folder)
    assert "Gemma3ForCausalLM: layers 0 (sliding_attention) attend to a window of 8 tokens" in problem
    assert problem.endswith("set share_prefix=false")
