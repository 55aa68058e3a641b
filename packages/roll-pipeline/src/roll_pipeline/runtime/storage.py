"""The storage check at start: every node that can host a worker sees the driver's run folder and the model.

Under Ray the train worker writes its checkpoint into the run folder on the node it runs on, every role loads
the model from its folder there, and the driver writes the checkpoint's manifest, the metrics and the run
state on its own disk. Without a filesystem that every node mounts at the same path, each checkpoint would
be rejected later (its files on one disk, its manifest on another) and a model folder missing on a node
would fail deep inside a worker. So before any worker starts, the driver writes a token file of random
content into the run folder and a probe on every node (`Cluster.on_each_node`) reads it back and looks for
the model folder; a node that cannot is one `StorageError` naming the node, the path and the fix. In-process
(`cluster.backend=local`) the one node is this machine and the check is one cheap read.

The probe is handed the same path strings the workers get, so a relative `output_dir` is checked as the
workers resolve it (against the driver's working directory, on their own node).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from roll_pipeline.runtime.cluster import Cluster, ClusterError

__all__ = ["TOKEN_PREFIX", "StorageError", "StorageProbe", "confirm_shared_storage"]

TOKEN_PREFIX = ".storage_check_"
"""Name prefix of the token file the check writes into the run folder (removed when the check ends)."""


class StorageError(ClusterError):
    """A node cannot see the driver's run folder or the model folder."""


class StorageProbe:
    """Runs on one node: reads the driver's token file back and looks for the model folder."""

    def check(self, token_file: str, token: str, model_path: str) -> list[str]:
        """What this node cannot see (empty: it sees both)."""
        problems = []
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except OSError as exc:
            problems.append(f"cannot read the run folder's check file {token_file} ({type(exc).__name__})")
        else:
            if text != token:
                problems.append(
                    f"reads other content from {token_file}: another disk is mounted at the run folder's path"
                )
        if not Path(model_path).is_dir():
            problems.append(f"has no model folder {model_path}")
        return problems


def confirm_shared_storage(
    cluster: Cluster, run_dir: str | Path, model_path: str | Path, probe: type = StorageProbe
) -> None:
    """Raise `StorageError` unless every node of `cluster` reads the driver's token file in `run_dir` and finds
    `model_path`; `probe` is the class run on each node (`StorageProbe`: a test passes one that sees another
    disk)."""
    token = secrets.token_hex(16)
    token_file = Path(run_dir) / f"{TOKEN_PREFIX}{token[:12]}"
    token_file.write_text(token, encoding="utf-8")
    try:
        reports = cluster.on_each_node(probe, "check", str(token_file), token, str(model_path))
    finally:
        token_file.unlink(missing_ok=True)
    failed = {where: problems for where, problems in reports.items() if problems}
    if failed:
        raise StorageError(_message(failed, len(reports), Path(run_dir), Path(model_path)))


def _message(failed: dict[str, list[str]], nodes: int, run_dir: Path, model_path: Path) -> str:
    lines = [
        f"{len(failed)} of {nodes} node(s) cannot see the driver's files, so the workers there could neither"
        " write checkpoints the driver can verify nor load the model:",
        *(f"  - {where} {'; '.join(problems)}" for where, problems in failed.items()),
        f"Under Ray the workers write into the run folder {run_dir.absolute()} (output_dir/exp_name) and load"
        f" the model from {model_path.absolute()} on their own node, while the driver writes the run's"
        " manifest, metrics and state on its disk. Fix: put output_dir and the model (pretrain; a builtin:"
        " model is cached under ROLL_CACHE_DIR, a hub id under HF_HOME) on a shared filesystem such as NFS,"
        " mounted at the same path on every node, with absolute paths; or run on one node"
        " (cluster.backend=local, or a one-node Ray).",
    ]
    return "\n".join(lines)
