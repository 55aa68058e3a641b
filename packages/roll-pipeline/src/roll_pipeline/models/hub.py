"""`pretrain` as a Hugging Face hub id (`Org/Name`): its snapshot folder in the local Hugging Face cache.

Workers load local folders only (`roll_strategies.models._loading`), so the driver resolves a hub id once, to
`<HF_HUB_CACHE>/models--Org--Name/snapshots/<commit>/`, and every role (and a `gguf_file` inside it) loads
that folder. With `HF_HUB_OFFLINE=1` only the cache is read; otherwise the snapshot is downloaded (or
brought up to date) first, and the cache serves when the hub cannot be reached. A model that is neither
cached nor downloadable is one `HubModelError` naming the id and the command that fetches it.

The cache location and offline mode are read from the environment at each call (`HF_HUB_CACHE`, else
`HF_HOME/hub`; `HF_HUB_OFFLINE`): huggingface_hub reads them once, when it is first imported.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "HUB_ID",
    "HubModelError",
    "add_to_hub_cache",
    "fetch_command",
    "hub_cache_dir",
    "hub_offline",
    "hub_problem",
    "hub_snapshot",
    "is_hub_id",
]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""`Org/Name`, as on huggingface.co (ids without an organisation are read as folder names)."""

# Weight formats transformers' PyTorch path never loads: a repo that ships them too (onnx/, flax, tf) need not
# be downloaded whole. GGUF files are kept: `model_args.gguf_file` loads one from the snapshot.
_IGNORED = ["*.onnx", "onnx/*", "*.h5", "*.msgpack", "*.tflite", "*.ot", "*.mlmodel", "*.mlpackage/*"]
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's spelling of a true environment flag
_PROBE_TIMEOUT_S = 10.0  # `roll config` waits at most this long for the hub's answer before reporting it
_GATED = "is gated: accept its terms on its huggingface.co page, then log in with `hf auth login`"


class HubModelError(FileNotFoundError):
    """A hub id that is neither in the local Hugging Face cache nor downloadable now."""


def is_hub_id(pretrain: str) -> bool:
    """True for `Org/Name` that is not an existing local path (a local folder wins, as in from_pretrained)."""
    return bool(HUB_ID.match(pretrain)) and not Path(pretrain).expanduser().exists()


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    home = os.environ.get("HF_HOME") or str(Path(xdg) / "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def hub_offline() -> bool:
    """Whether `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) forbids network access to the hub."""
    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.upper() in _TRUE


def fetch_command(repo_id: str, gguf_file: str | None = None) -> str:
    """The shell command that puts `repo_id` (or just its `gguf_file`) into the Hugging Face cache."""
    return f"hf download {repo_id}" + (f" {gguf_file}" if gguf_file else "")


def _needed_file(gguf_file: str | None) -> str:
    """The file a snapshot must hold to load: the GGUF file when one is named, else config.json."""
    return gguf_file or "config.json"


def _lacks(folder: Path, gguf_file: str | None) -> str | None:
    """What a local snapshot lacks to load (a partial download, e.g. only the config), or None."""
    needed = _needed_file(gguf_file)
    if not (folder / needed).is_file():
        return needed
    weights = ("*.safetensors", "pytorch_model*.bin")
    if not gguf_file and not any(any(folder.glob(pattern)) for pattern in weights):
        return "weights (*.safetensors or pytorch_model*.bin)"
    return None


def _patterns(gguf_file: str | None) -> dict[str, list[str] | None]:
    """Download filters: with a GGUF file only it (and small json files), else every PyTorch-loadable file."""
    if gguf_file:  # a GGUF repo holds many quantisations of one model; one is loaded
        return {"allow_patterns": [gguf_file, "*.json"], "ignore_patterns": None}
    return {"allow_patterns": None, "ignore_patterns": _IGNORED}


def _missing_message(repo_id: str, gguf_file: str | None, why: str) -> str:
    fix = fetch_command(repo_id, gguf_file)
    return (
        f"pretrain={repo_id!r}: the Hugging Face hub id {why}; fetch it with `{fix}` (it lands in "
        f"{hub_cache_dir()}, the cache HF_HUB_CACHE / HF_HOME select), or set pretrain to a local model folder"
    )


def _cached(repo_id: str, gguf_file: str | None) -> Path | None:
    """The cached snapshot folder of `repo_id` if it holds the needed file, without any network access."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(
            snapshot_download(
                repo_id, cache_dir=hub_cache_dir(), local_files_only=True, **_patterns(gguf_file)
            )
        )
    except LocalEntryNotFoundError:  # absent, or known incomplete (IncompleteSnapshotError)
        return None
    return None if _lacks(folder, gguf_file) else folder


def hub_snapshot(repo_id: str, *, gguf_file: str | None = None) -> Path:
    """The local snapshot folder of `repo_id`, downloaded first unless offline.

    Args:
        repo_id: `Org/Name` on huggingface.co.
        gguf_file: a GGUF file of the repo that will be loaded; only it is downloaded.
    Raises:
        HubModelError: not cached and offline, unreachable, unknown or gated on the hub, or its snapshot
            lacks config.json (or `gguf_file`); the message names the id and `hf download ...`.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError

    offline = hub_offline()
    try:
        folder = Path(
            snapshot_download(
                repo_id, cache_dir=hub_cache_dir(), local_files_only=offline, **_patterns(gguf_file)
            )
        )
    except LocalEntryNotFoundError as exc:
        why = (
            "is not (completely) in the local cache and HF_HUB_OFFLINE=1 forbids downloading it"
            if offline
            else f"is not in the local cache and could not be downloaded ({_first_line(exc)})"
        )
        raise HubModelError(_missing_message(repo_id, gguf_file, why)) from exc
    except GatedRepoError as exc:
        raise HubModelError(_missing_message(repo_id, gguf_file, _GATED)) from exc
    except HfHubHTTPError as exc:  # RepositoryNotFoundError, RevisionNotFoundError, server errors
        why = (
            f"is not in the local cache and the hub refused it ({_first_line(exc)}); check the id's spelling"
        )
        raise HubModelError(_missing_message(repo_id, gguf_file, why)) from exc
    lacking = _lacks(folder, gguf_file)
    if lacking:
        raise HubModelError(
            _missing_message(repo_id, gguf_file, f"has no {lacking} in its snapshot {folder}")
        )
    return folder


def hub_problem(repo_id: str, gguf_file: str | None = None) -> str | None:
    """What stops `repo_id` loading, found without downloading a weight: None when its snapshot is cached
    (with config.json or `gguf_file`), or when online and the hub lists the needed file."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError

    if _cached(repo_id, gguf_file) is not None:
        return None
    if hub_offline():
        why = "is not in the local cache and HF_HUB_OFFLINE=1 forbids downloading it"
        return _missing_message(repo_id, gguf_file, why)
    try:  # the repo's file list: no weights
        info = HfApi().model_info(repo_id, timeout=_PROBE_TIMEOUT_S)
    except GatedRepoError:
        return _missing_message(repo_id, gguf_file, _GATED)
    except HfHubHTTPError as exc:  # RepositoryNotFoundError, server errors
        why = (
            f"is not in the local cache and the hub refused it ({_first_line(exc)}); check the id's spelling"
        )
        return _missing_message(repo_id, gguf_file, why)
    except Exception as exc:  # the hub unreachable: requests' or httpx's errors, by huggingface_hub version
        why = f"is not in the local cache and the hub could not be reached ({_first_line(exc)})"
        return _missing_message(repo_id, gguf_file, why)
    needed = _needed_file(gguf_file)
    if needed not in {sibling.rfilename for sibling in info.siblings or []}:
        return _missing_message(repo_id, gguf_file, f"has no {needed} on the hub")
    return None


def _first_line(exc: BaseException) -> str:
    """`Type: first line` of an error, for a one-line message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def add_to_hub_cache(
    folder: str | Path, repo_id: str, *, cache_dir: str | Path | None = None, revision: str = "main"
) -> Path:
    """Lay out a local model folder as `repo_id`'s snapshot in a Hugging Face cache; returns the snapshot.

    The layout is huggingface_hub's own (`scan_cache_dir` reads it): files stored once under `blobs/<sha256>`,
    `snapshots/<commit>/<path>` symlinks to them, `refs/<revision>` naming the commit. The commit is a hash of
    the files, so the same folder gives the same snapshot. For machines without network (copy a model in,
    then `pretrain=repo_id` works with HF_HUB_OFFLINE=1) and for tests of hub ids.

    Args:
        folder: a model folder (config.json, weights, tokenizer files); sub-folders are kept.
        repo_id: `Org/Name` to file it under.
        cache_dir: the hub cache (default `hub_cache_dir()`: HF_HUB_CACHE, else HF_HOME/hub).
        revision: the ref that names the snapshot.
    """
    import hashlib
    import shutil

    if not HUB_ID.match(repo_id):
        raise ValueError(f"Expected a hub id of the form Org/Name, got {repo_id!r}.")
    source = Path(folder)
    files = sorted(p for p in source.rglob("*") if p.is_file())
    if not (source / "config.json").is_file() and not any(p.suffix == ".gguf" for p in files):
        raise FileNotFoundError(f"Expected a model folder with config.json (or a .gguf file) at {source}.")
    repo = Path(cache_dir or hub_cache_dir()) / f"models--{repo_id.replace('/', '--')}"
    digests = {path.relative_to(source).as_posix(): _sha256(path) for path in files}
    commit = hashlib.sha1("\n".join(f"{n} {d}" for n, d in digests.items()).encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    for name, digest in digests.items():
        blob = repo / "blobs" / digest
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, blob)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)  # no newline, as huggingface_hub writes it
    return snapshot


def _sha256(path: Path) -> str:
    import hashlib

    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
