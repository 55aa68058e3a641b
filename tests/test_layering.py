"""The layering of docs/architecture.md, enforced: each package imports with the heavier ones absent, no
module import cycle exists in packages/, and a train worker runs its loss without the orchestrator."""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, importlib.util, pkgutil, sys
    BLOCKED = {blocked!r}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"layering: {{name}} must not be imported here")
            return None

    # As if not installed: a probe (importlib.util.find_spec, e.g. transformers asking whether deepspeed is
    # there once accelerate is installed) answers None; an import fails.
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: (
        None if name.split(".")[0] in BLOCKED else _find_spec(name, package)
    )
    sys.meta_path.insert(0, Block())
    import {package} as pkg
    for info in pkgutil.walk_packages(pkg.__path__, prefix="{package}."):
        __import__(info.name)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("ok", len(pkg.__all__))
    """
)

CASES = {
    "roll_envs": [
        "torch",
        "ray",
        "transformers",
        "vllm",
        "deepspeed",
        "roll_rollout",
        "roll_algos",
        "roll_strategies",
        "roll_pipeline",
    ],
    "roll_algos": [
        "ray",
        "transformers",
        "vllm",
        "deepspeed",
        "roll_envs",
        "roll_rollout",
        "roll_strategies",
        "roll_pipeline",
    ],
    "roll_rollout": [
        "torch",
        "ray",  # roll-rollout does not depend on Ray: the pipeline makes its workers actors
        "transformers",
        "vllm",
        "deepspeed",
        "roll_algos",
        "roll_strategies",
        "roll_pipeline",
    ],
    "roll_strategies": ["ray", "vllm", "deepspeed", "roll_envs", "roll_rollout", "roll_pipeline"],
}


@pytest.mark.parametrize("package", sorted(CASES))
def test_package_imports_without_heavier_layers(package):
    code = BLOCKER.format(blocked=set(CASES[package]), package=package)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{package} imports a forbidden layer:\n{proc.stderr[-3000:]}"
    assert proc.stdout.startswith("ok")


def test_every_export_is_documented():
    """Each package's __all__ resolves, and every exported object that can carry a docstring has one."""
    import importlib

    for name in ["roll_envs", "roll_algos", "roll_rollout", "roll_strategies", "roll_pipeline"]:
        module = importlib.import_module(name)
        for export in module.__all__:
            obj = getattr(module, export)
            if callable(obj) and not isinstance(obj, type(sys)):
                assert (obj.__doc__ or "").strip(), f"{name}.{export} has no docstring"


SOURCES = Path(__file__).resolve().parents[1] / "packages"


def _module_files() -> dict[str, Path]:
    """Every module of the five packages by its dotted name (a package by its `__init__`)."""
    modules = {}
    for path in SOURCES.glob("*/src/**/*.py"):
        parts = path.relative_to(path.parents[len(path.relative_to(SOURCES).parts) - 3]).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(node.test)


def _import_statements(path: Path, name: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each import the module `name` runs, at module level or inside a function but not under
    `if TYPE_CHECKING:` (never executed), as (absolute module, names taken from it): `import a.b` is
    ("a.b", ()), `from .c import d` in package `p` is ("p.c", ("d",))."""
    is_package = path.name == "__init__.py"
    found: list[tuple[str, tuple[str, ...]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((base, tuple(alias.name for alias in node.names)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that `name` imports when it runs (`_import_statements`). A module's parent
    packages, which Python initialises first anyway, are no edge of their own."""
    found: set[str] = set()
    for base, names in _import_statements(path, name):
        if not names:
            found.add(base)
        for alias in names:  # `from pkg import module` needs only the module (pkg is its parent)
            found.add(f"{base}.{alias}" if f"{base}.{alias}" in modules else base)
    return {m for m in found if m in modules and m != name}


LAZY_EXTRAS = {"roll_strategies": {"vllm", "deepspeed"}}
"""Layers a package imports only inside the code that needs them: roll_strategies' vLLM and DeepSpeed backends
import their extra when they start."""


def _heavier_imports(modules: dict[str, Path], blocked: set[str]) -> list[str]:
    """Each import of a module of `modules`, at module level or inside a function, of a package in `blocked`."""
    return sorted(
        f"{name} imports {base}"
        for name, path in modules.items()
        for base, _ in _import_statements(path, name)
        if base.split(".")[0] in blocked
    )


def test_heavier_import_scan_reads_function_level_imports(tmp_path):
    (tmp_path / "light.py").write_text("import json\ndef f():\n    import torch.nn\n")
    (tmp_path / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    )
    modules = {p.stem: p for p in tmp_path.glob("*.py")}
    assert _heavier_imports(modules, {"torch"}) == ["light imports torch.nn"]


@pytest.mark.parametrize("package", sorted(CASES))
def test_no_module_imports_a_heavier_layer_even_inside_a_function(package):
    """`test_package_imports_without_heavier_layers` runs what a module imports when it loads; this scan reads
    every import of every module, inside functions too, so a lazy `import torch` in roll_envs fails here."""
    modules = {name: path for name, path in _module_files().items() if name.split(".")[0] == package}
    assert len(modules) > 10
    blocked = set(CASES[package]) - LAZY_EXTRAS.get(package, set())
    assert _heavier_imports(modules, blocked) == [], (
        f"{package} imports a layer it must not (docs/architecture.md), inside a function too"
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    """The scan itself: an import inside a function closes a cycle; one under TYPE_CHECKING does not."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n")
    modules = {p.stem: p for p in tmp_path.glob("*.py")}
    graph = {name: _imports(path, name, modules) for name, path in modules.items()}
    assert graph == {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]


def test_no_import_cycle_in_packages():
    modules = _module_files()
    assert {"roll_pipeline.cli.commands", "roll_envs.baselines", "roll_algos.objectives"} <= set(modules)
    graph = {name: _imports(path, name, modules) for name, path in modules.items()}
    assert sum(map(len, graph.values())) > 200  # the scan sees the imports
    assert _cycles(graph) == [], (
        "import cycles (break them by moving the shared name to a module both import)"
    )


WORKER = textwrap.dedent(
    """
    import pickle, sys
    import torch
    loss = pickle.loads(sys.stdin.buffer.read())
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    old = torch.log(torch.tensor([[0.5, 0.999, 1.0], [0.25, 0.5, 0.999]]))
    mb = {"response_mask": mask, "old_log_probs": old, "ref_log_probs": old - 0.1,
          "advantages": torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]])}
    log_probs = (old + 0.05).requires_grad_()
    value, metrics = loss(log_probs, None, mb)
    value.backward()
    assert torch.isfinite(value) and log_probs.grad.abs().sum() > 0, metrics
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("roll_pipeline", "roll_rollout"))
    print("leaked", leaked)
    """
)


def test_a_train_worker_runs_the_actor_loss_without_the_orchestrator():
    """The pipeline's configured actor loss, pickled as it travels to a train worker, unpickles and runs in a
    process that imports neither roll_pipeline nor roll_rollout."""
    from roll_pipeline import tiny_config
    from roll_pipeline.assembly.settings import actor_loss

    loss = actor_loss(tiny_config(skip_confident_tokens=0.99, use_kl_loss=True, kl_penalty="k3"), 0.1)
    assert type(loss).__module__.startswith("roll_algos.")
    proc = subprocess.run(
        [sys.executable, "-c", WORKER], input=pickle.dumps(loss), capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert proc.stdout.decode().strip() == "leaked []"


def _names_used(path: Path) -> set[str]:
    """Every identifier a module imports or reads."""
    tree = ast.parse(path.read_text(), str(path))
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    return names | {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def test_trainer_and_runtime_components_never_receive_the_whole_config():
    """Below the entry points a component gets its own settings (a config section such as a role's
    WorkerConfig is fine): no module of trainer/ or runtime/ uses the run's AgenticConfig (the translation is
    assembly/settings.py, a floor above)."""
    modules = _module_files()
    readers = sorted(
        name
        for name, path in modules.items()
        if name.startswith(("roll_pipeline.trainer.", "roll_pipeline.runtime."))
        and "AgenticConfig" in _names_used(path)
    )
    assert readers == []


PIPELINE_FLOORS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("pipeline", "serving", "experiments"),
    ("assembly", "preflight"),
    ("trainer",),
    ("runtime", "observe", "migrate"),
    ("config",),
    ("state", "models", "roll_keys"),
)
"""roll_pipeline's rooms, top floor first (docs/architecture.md draws them): a module imports only from its own
room or from a floor below, never up and never sideways. The package's `__init__` is the face above them all."""

ROLLOUT_FLOORS: tuple[tuple[str, ...], ...] = (
    ("scheduling", "testing", "_moved"),
    ("hosting",),
    ("policies", "plan", "schema"),
    ("prompts", "wire"),
    ("errors",),
)
"""roll_rollout's rooms, top floor first, as for roll_pipeline (docs/architecture.md draws them). `_moved` (the
old flat paths, imported by name at run time) stands on the top floor beside the scheduler and the test doubles."""

STRATEGIES_FLOORS: tuple[tuple[str, ...], ...] = (
    ("workers",),
    ("infer", "train"),
    ("protocols",),
    ("sync", "compute"),
    ("models", "registry"),
    ("errors",),
)
"""roll_strategies' rooms, top floor first, as for roll_pipeline (docs/architecture.md draws them)."""

FLOORS = {
    "roll_pipeline": PIPELINE_FLOORS,
    "roll_rollout": ROLLOUT_FLOORS,
    "roll_strategies": STRATEGIES_FLOORS,
}


def _room(module: str, package: str) -> str | None:
    """The room of a module of `package` (its sub-package or top-level module); None for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == package and len(parts) > 1 else None


def _floor_breaks(graph: dict[str, set[str]], package: str, floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Each import between two rooms of `package` that does not go down a floor, as `a -> b (room up/sideways)`;
    and each room the floors do not name."""
    level = {room: i for i, rooms in enumerate(floors) for room in rooms}
    breaks = []
    for source, targets in sorted(graph.items()):
        here = _room(source, package)
        if here is None:
            continue
        if here not in level:
            breaks.append(f"{source}: room {here!r} is on no floor")
            continue
        for target in sorted(targets):
            there = _room(target, package)
            if there is None or there == here:
                continue
            if there not in level:
                breaks.append(f"{target}: room {there!r} is on no floor")
            elif level[there] <= level[here]:
                way = "up" if level[there] < level[here] else "sideways"
                breaks.append(f"{source} -> {target} ({here} imports {there}, {way})")
    return breaks


def test_floor_check_finds_a_function_level_import_that_goes_up(tmp_path):
    """The check itself: a lazy import from a lower room into a higher one, or between two rooms of one floor,
    is a break; an import down a floor or inside a room is not."""
    for room in ("top", "low", "side"):
        (tmp_path / "pkg" / room).mkdir(parents=True)
        (tmp_path / "pkg" / room / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "top" / "a.py").write_text("from pkg.low.b import x\n")
    (tmp_path / "pkg" / "low" / "b.py").write_text(
        "from pkg.low.c import y\ndef f():\n    from pkg.top.a import z\n"
    )
    (tmp_path / "pkg" / "low" / "c.py").write_text("import pkg.side.d\n")
    (tmp_path / "pkg" / "side" / "d.py").write_text("")
    modules = {}
    for path in (tmp_path / "pkg").rglob("*.py"):
        parts = path.relative_to(tmp_path).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imports(path, name, modules) for name, path in modules.items()}
    floors = (("top",), ("low", "side"))
    assert _floor_breaks(graph, "pkg", floors) == [
        "pkg.low.b -> pkg.top.a (low imports top, up)",
        "pkg.low.c -> pkg.side.d (low imports side, sideways)",
    ]


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_floors_run_one_way(package):
    """No import of the package, at module level or inside a function, goes up a floor or sideways."""
    modules = {name: path for name, path in _module_files().items() if name.split(".")[0] == package}
    graph = {name: _imports(path, name, modules) for name, path in modules.items()}
    assert sum(map(len, graph.values())) > 50  # the scan sees the imports
    rooms = {_room(name, package) for name in modules} - {None}
    assert rooms == {room for floor in FLOORS[package] for room in floor}, "a room is missing from the floors"
    assert _floor_breaks(graph, package, FLOORS[package]) == []
