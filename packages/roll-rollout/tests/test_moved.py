"""The old flat module paths (`roll_rollout.scheduler`, ...) import as the moved modules, with a warning that
names the new path; nothing in the package imports an old path itself."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import roll_rollout
from roll_rollout._moved import MOVED

PACKAGE = Path(roll_rollout.__file__).parent


@pytest.fixture
def fresh_old_paths(monkeypatch):
    """Forget the old paths and the package attributes an import of one sets (restored after the test), so
    importing one runs its alias again and warns."""
    for old in MOVED:
        monkeypatch.delitem(sys.modules, old, raising=False)
        if (name := old.removeprefix("roll_rollout.")) in vars(roll_rollout):  # hasattr would import it
            monkeypatch.delattr(roll_rollout, name)


def test_every_moved_module_is_at_its_new_path_and_none_at_its_old_one():
    assert len(MOVED) == 27
    for old, new in MOVED.items():
        assert (PACKAGE.parent / f"{new.replace('.', '/')}.py").is_file(), new
        assert not (PACKAGE.parent / f"{old.replace('.', '/')}.py").exists(), old


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_is_the_new_module_with_a_deprecation_warning(fresh_old_paths, old, new):
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}: .*roll-rollout 0\.3\.0"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert sys.modules[old] is module


def test_from_imports_and_attributes_of_old_paths_give_the_same_objects(fresh_old_paths):
    from roll_rollout.hosting.worker import EnvWorker
    from roll_rollout.scheduling.scheduler import RolloutScheduler

    with pytest.warns(DeprecationWarning, match="roll_rollout.hosting.worker"):
        from roll_rollout.worker import EnvWorker as old_worker
    assert old_worker is EnvWorker and EnvWorker.__module__ == "roll_rollout.hosting.worker"
    assert "scheduler" not in vars(roll_rollout)  # so the attribute is read through the package's __getattr__
    with pytest.warns(DeprecationWarning, match="roll_rollout.scheduling.scheduler"):
        assert roll_rollout.scheduler.RolloutScheduler is RolloutScheduler
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        roll_rollout.nothing_here  # noqa: B018


def test_import_roll_rollout_touches_no_old_path():
    """The package imports only new paths, so importing every module of it warns about nothing."""
    code = (
        "import warnings, pkgutil; warnings.simplefilter('error', DeprecationWarning); import roll_rollout\n"
        "for info in pkgutil.walk_packages(roll_rollout.__path__, prefix='roll_rollout.'):\n"
        "    __import__(info.name)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
