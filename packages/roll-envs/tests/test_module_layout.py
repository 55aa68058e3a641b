"""The module layout: the SDK at the top level, the games in `roll_envs.envs`, the adapters in
`roll_envs.adapters`; the old paths of moved modules still import, as the new modules, with a warning."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
import roll_envs
import roll_envs.baselines
from roll_envs.envs.builtins import ADAPTER_NAMESPACES, BUILTINS

MOVED = {
    "roll_envs.four_choice": "roll_envs.envs.four_choice",
    "roll_envs.tictactoe": "roll_envs.envs.tictactoe",
    "roll_envs.builtins": "roll_envs.envs.builtins",
    "roll_envs.gym_adapter": "roll_envs.adapters.gym",
    "roll_envs.frozen_lake": "roll_envs.envs.frozen_lake",
    "roll_envs.sokoban": "roll_envs.envs.sokoban",
    "roll_envs.webshop": "roll_envs.envs.webshop",
}
"""Old path -> new path of every moved module (a package's submodules move with it)."""

OLD_PATHS = ("roll_envs.four_choice", "roll_envs.tictactoe", "roll_envs.builtins", "roll_envs.gym_adapter")
"""Old paths that begin every entry point before the move, packages included through their prefix."""

PACKAGE = Path(roll_envs.__file__).parent


@pytest.fixture
def fresh_old_paths(monkeypatch):
    """Forget the old paths (restored after the test), so importing one runs its alias again and warns."""
    for name in list(sys.modules):
        if any(name == old or name.startswith(f"{old}.") for old in MOVED):
            monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_is_the_new_module_with_a_deprecation_warning(fresh_old_paths, old, new):
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}: .*roll-envs 0\.3\.0"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize("package", ["frozen_lake", "sokoban", "webshop"])
def test_an_old_package_path_keeps_its_submodules(fresh_old_paths, package):
    new = importlib.import_module(f"roll_envs.envs.{package}")
    submodules = sorted(p.stem for p in Path(new.__file__).parent.glob("*.py") if p.stem != "__init__")
    assert submodules
    with pytest.warns(DeprecationWarning, match=f"roll_envs.envs.{package}"):
        for sub in submodules:
            assert (
                importlib.import_module(f"roll_envs.{package}.{sub}") is sys.modules[f"{new.__name__}.{sub}"]
            )


def test_from_imports_of_old_paths_give_the_same_objects(fresh_old_paths):
    with pytest.warns(DeprecationWarning):
        from roll_envs.frozen_lake.rules import move
        from roll_envs.gym_adapter import GymAdapterEnv
        from roll_envs.sokoban.env import SokobanEnv
        from roll_envs.tictactoe import TicTacToeEnv
        from roll_envs.webshop.catalog import load_catalog
    assert move is roll_envs.envs.frozen_lake.rules.move
    assert (GymAdapterEnv, SokobanEnv, TicTacToeEnv) == (
        roll_envs.GymAdapterEnv,
        roll_envs.SokobanEnv,
        roll_envs.envs.tictactoe.TicTacToeEnv,
    )
    assert load_catalog is roll_envs.envs.webshop.catalog.load_catalog
    assert TicTacToeEnv.__module__ == "roll_envs.envs.tictactoe"  # what a pickle records


def test_frozen_lake_baseline_names_in_roll_envs_baselines_warn():
    with pytest.warns(
        DeprecationWarning, match=r"roll_envs\.envs\.frozen_lake\.baselines\.PRECOMPUTED_SEQUENCES"
    ):
        found = roll_envs.baselines.PRECOMPUTED_SEQUENCES
    assert found is roll_envs.envs.frozen_lake.baselines.PRECOMPUTED_SEQUENCES
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        roll_envs.baselines.nothing_here  # noqa: B018


def test_import_roll_envs_touches_no_old_path():
    """The package itself imports only new paths, so `import roll_envs` warns about nothing."""
    code = "import warnings; warnings.simplefilter('error', DeprecationWarning); import roll_envs"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_registered_entry_points_use_the_new_paths():
    entry_points = [b.entry_point for b in BUILTINS] + [entry for _, entry, _ in ADAPTER_NAMESPACES]
    entry_points += [s.entry_point for name, s in gymnasium.registry.items() if name.startswith("roll_envs/")]
    entry_points += [roll_envs.spec(b.id).entry_point for b in BUILTINS]
    assert len(entry_points) > 20
    for entry_point in entry_points:
        assert isinstance(entry_point, str) and entry_point.startswith(
            ("roll_envs.envs.", "roll_envs.adapters.")
        ), entry_point
        assert not entry_point.startswith(OLD_PATHS), entry_point


def _module_level_imports(path: Path) -> set[str]:
    """The absolute module names a file imports at module level (not inside functions)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_sdk_imports_no_game_and_no_adapter():
    """Top-level modules (the SDK) do not import `roll_envs.envs` or `roll_envs.adapters` when they load;
    only `__init__`, which assembles the public names, and the aliases of old paths do."""
    aliases = {old.removeprefix("roll_envs.") for old in MOVED}
    sdk = [p for p in PACKAGE.glob("*.py") if p.stem not in {"__init__", *aliases}]
    assert {"base", "registry", "checker", "baselines", "tiles"} <= {p.stem for p in sdk}
    for path in sdk:
        games = {
            m for m in _module_level_imports(path) if m.startswith(("roll_envs.envs", "roll_envs.adapters"))
        }
        assert not games, f"{path.name} imports {sorted(games)}: the SDK must not depend on the games"


def test_every_module_is_named_in_its_package_docstring_or_the_readme():
    readme = (PACKAGE.parents[1] / "README.md").read_text()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        doc = importlib.import_module(".".join(path.parent.relative_to(PACKAGE.parent).parts)).__doc__ or ""
        where = path.relative_to(PACKAGE).as_posix()
        assert path.name in doc or where in readme, (
            f"{where} is in neither its package docstring nor README.md"
        )
