"""`pretrain` as a Hugging Face hub id: resolved to its snapshot in a real hub-cache layout, offline.

The cache is laid out by `add_to_hub_cache` from a builtin model folder and read back by huggingface_hub's own
`scan_cache_dir` (the independent reference for the layout). No test reaches a network: offline tests set
HF_HUB_OFFLINE=1, "online" ones point the hub endpoint at a closed local port.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from roll_pipeline.cli import commands as cli
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.models.hub import HubModelError, add_to_hub_cache, hub_cache_dir, hub_problem
from roll_pipeline.preflight import check_pretrain


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache in HF_HUB_CACHE, offline."""
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture(scope="module")
def model_folder() -> Path:
    return Path(resolve_pretrain("builtin:tiny-frozen-lake"))


def test_the_layout_is_the_one_huggingface_hub_reads(hub, model_folder):
    from huggingface_hub import scan_cache_dir

    snapshot = add_to_hub_cache(model_folder, "Org/Name")
    info = scan_cache_dir(hub)
    assert info.warnings == []
    (repo,) = info.repos
    (revision,) = repo.revisions
    assert (repo.repo_id, repo.repo_type, revision.refs) == ("Org/Name", "model", frozenset({"main"}))
    assert Path(revision.snapshot_path) == snapshot
    assert {f.file_name for f in revision.files} == {p.name for p in model_folder.iterdir() if p.is_file()}
    for name in ("config.json", "model.safetensors"):  # symlinks into blobs/ with the same bytes
        assert (snapshot / name).is_symlink()
        assert (snapshot / name).read_bytes() == (model_folder / name).read_bytes()
    assert add_to_hub_cache(model_folder, "Org/Name") == snapshot  # same files -> same commit


def test_a_cached_hub_id_resolves_to_its_snapshot_and_loads(hub, model_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    snapshot = add_to_hub_cache(model_folder, "Org/Name")
    assert resolve_pretrain("Org/Name") == snapshot
    assert check_pretrain("Org/Name") == []
    tokenizer = AutoTokenizer.from_pretrained(snapshot, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(snapshot, local_files_only=True)
    reference = AutoModelForCausalLM.from_pretrained(model_folder)
    assert tokenizer.encode("<answer>Left</answer>") == AutoTokenizer.from_pretrained(model_folder).encode(
        "<answer>Left</answer>"
    )
    assert all(
        a.equal(b) for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True)
    )


def test_hf_home_selects_the_cache_when_hf_hub_cache_is_unset(tmp_path, monkeypatch, model_folder):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    snapshot = add_to_hub_cache(model_folder, "Org/Name")
    assert snapshot.is_relative_to(tmp_path / "hf" / "hub")
    assert resolve_pretrain("Org/Name") == snapshot


def test_a_missing_id_is_one_error_naming_the_id_and_the_fetch_command(hub):
    (problem,) = check_pretrain("Org/Missing")
    with pytest.raises(HubModelError) as caught:
        resolve_pretrain("Org/Missing")
    for message in (problem, str(caught.value)):
        assert message.startswith("pretrain='Org/Missing': the Hugging Face hub id")
        assert "HF_HUB_OFFLINE=1 forbids downloading it" in message
        assert "`hf download Org/Missing`" in message and str(hub) in message


def test_a_partial_snapshot_is_not_a_model(hub, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "model.gguf").write_bytes(b"GGUF")
    add_to_hub_cache(partial, "Org/Gguf")
    assert "`hf download Org/Gguf`" in check_pretrain("Org/Gguf")[0]
    with pytest.raises(HubModelError, match=r"has no config\.json in its snapshot"):
        resolve_pretrain("Org/Gguf")
    (partial / "config.json").write_text("{}")  # a config, as an interrupted download leaves it, no weights
    add_to_hub_cache(partial, "Org/Gguf")
    with pytest.raises(HubModelError, match=r"has no weights \(\*.safetensors"):
        resolve_pretrain("Org/Gguf")


def test_a_gguf_file_resolves_inside_the_snapshot(hub, tmp_path):
    repo = tmp_path / "gguf-repo"
    repo.mkdir()
    (repo / "model-q8_0.gguf").write_bytes(b"GGUF")
    snapshot = add_to_hub_cache(repo, "Org/Model-GGUF")
    assert resolve_pretrain("Org/Model-GGUF", gguf_file="model-q8_0.gguf") == snapshot
    assert check_pretrain("Org/Model-GGUF", gguf_file="model-q8_0.gguf") == []
    (problem,) = check_pretrain("Org/Model-GGUF", gguf_file="model-q4.gguf")
    assert "`hf download Org/Model-GGUF model-q4.gguf`" in problem


def test_online_an_unreachable_hub_falls_back_to_the_cache(hub, monkeypatch, model_folder):
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # closed port
    snapshot = add_to_hub_cache(model_folder, "Org/Name")
    assert resolve_pretrain("Org/Name") == snapshot
    assert hub_problem("Org/Name") is None
    problem = hub_problem("Org/Missing")
    with pytest.raises(HubModelError) as caught:
        resolve_pretrain("Org/Missing")
    for message in (problem, str(caught.value)):
        assert "pretrain='Org/Missing'" in message and "ConnectError" in message
        assert "`hf download Org/Missing`" in message


def test_a_local_folder_named_like_a_hub_id_wins(hub, tmp_path, monkeypatch, model_folder):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Org").mkdir()
    (tmp_path / "Org" / "Name").symlink_to(model_folder)
    assert resolve_pretrain("Org/Name") == "Org/Name"
    assert check_pretrain("Org/Name") == []


def test_roll_config_accepts_a_cached_hub_id_and_refuses_a_missing_one(hub, model_folder, capsys):
    snapshot = add_to_hub_cache(model_folder, "Org/Name")
    assert cli.main(["config", "pretrain=Org/Name"]) == 0
    assert "pretrain: Org/Name" in capsys.readouterr().out
    assert cli.main(["config", "pretrain=Org/Missing"]) == 2
    err = capsys.readouterr().err
    assert "pretrain='Org/Missing'" in err and "`hf download Org/Missing`" in err
    assert str(snapshot) not in err
