"""All of ROLL's agentic configs at alibaba/ROLL 8eb27cc through `roll migrate` and roll's compose + preflight.

The configs are committed, unmodified and in their folders, under tests/data/roll_8eb27cc/ (its README.md says
which). The 40 files: the 36 non-empty YAMLs under examples/*agentic*/ (a 37th,
qwen2.5-0.5B-agentic/agentic_val_webshop.yaml, is empty at that commit) and the 4 agentic ones under tests/,
with examples/config/ (their Hydra defaults). Counted in docs/migrating_from_roll.md: 16 migrate with nothing
unsupported, all 40 with --drop-unsupported, and 24 then pass roll config on this machine (a local model,
hf_infer instead of vllm); each of the other 16 plays an env type roll has no env for, which both the
migration report and roll config name.

With a git mirror of alibaba/ROLL (`ROLL_MIRROR`, default /work/.mirror/alibaba+ROLL/repo), a second test
checks that the committed files are exactly the selected ones at that commit, byte for byte; it skips without one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from roll_pipeline.config.compose import ConfigError
from roll_pipeline.migrate.report import MigrationError
from roll_pipeline.migrate.translate import migrate_file, to_yaml
from roll_pipeline.preflight import compose

COMMIT = "8eb27cc"
ROLL_TREE = Path(__file__).resolve().parent / "data" / f"roll_{COMMIT}"
MIRROR = Path(os.environ.get("ROLL_MIRROR", "/work/.mirror/alibaba+ROLL/repo"))
ON_THIS_MACHINE = [
    "pretrain=builtin:tiny-frozen-lake",
    "cluster.backend=local",
    "actor_infer.strategy_args.strategy_name=hf_infer",
    "~actor_infer.strategy_args.strategy_config",
]


def _wanted(path: str) -> bool:
    """The files of ROLL's tree that ROLL_TREE holds: agentic YAMLs and examples/config/."""
    parts = path.split("/")
    if not path.endswith(".yaml"):
        return False
    if parts[0] == "examples":
        return (len(parts) == 3 and "agentic" in parts[1]) or parts[1] == "config"
    return parts[0] == "tests" and "agentic" in path


@pytest.mark.slow
def test_roll_agentic_configs_migrate_and_pass_roll_config(tmp_path: Path) -> None:
    files = [
        p
        for p in sorted(ROLL_TREE.rglob("*.yaml"))
        if p.parent.name != "config" and p.read_text(encoding="utf-8").strip()
    ]
    assert len(files) == 40
    strict, migrated, passed, stopped = 0, 0, 0, {}
    for i, path in enumerate(files):
        try:
            config, report = migrate_file(path)
            strict += 1
        except MigrationError:
            config, report = migrate_file(path, drop_unsupported=True)
        migrated += 1
        (tmp_path / f"c{i}.yaml").write_text(to_yaml(config, str(path)), encoding="utf-8")
        try:
            compose(str(tmp_path), f"c{i}", ON_THIS_MACHINE, preflight=True)
            passed += 1
        except ConfigError as exc:
            stopped[path.relative_to(ROLL_TREE)] = str(exc)
            named = {d.source_key for d in report.unsupported}
            # the one feature that stops it is in the migration report too: an env type roll has no env for
            assert "no env registered" in str(exc), str(exc)
            assert any(key.endswith(".env_type") for key in named), named
    print(
        f"\n{strict} of 40 migrate as they are, {migrated} with --drop-unsupported, {passed} pass roll config"
    )
    assert strict >= 16 and migrated == 40 and passed >= 24, stopped


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={MIRROR}", *args], capture_output=True, check=True, timeout=120
    ).stdout


def test_committed_roll_files_match_the_mirror() -> None:
    if not MIRROR.exists():
        pytest.skip(f"no alibaba/ROLL mirror at {MIRROR} (set ROLL_MIRROR to a git dir holding {COMMIT})")
    try:
        listed = _git("ls-tree", "-r", "--name-only", COMMIT, "--", "examples", "tests").decode().split()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"the mirror at {MIRROR} has no commit {COMMIT}: {exc.stderr.decode().strip()}")
    wanted = {p for p in listed if _wanted(p)}
    committed = {p.relative_to(ROLL_TREE).as_posix() for p in ROLL_TREE.rglob("*.yaml")}
    assert committed == wanted, f"only committed: {committed - wanted}; only in ROLL: {wanted - committed}"
    for path in [*sorted(wanted), "LICENSE"]:
        assert (ROLL_TREE / path).read_bytes() == _git("show", f"{COMMIT}:{path}"), (
            f"{path} differs from alibaba/ROLL {COMMIT}: copy it again with git show {COMMIT}:{path}"
        )
