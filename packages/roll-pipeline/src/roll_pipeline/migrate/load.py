"""Reading a ROLL config as ROLL's launcher composes it: the file's Hydra `defaults` (each `PATH@_here_` entry
merged at the top, relative to the file's folder, the file itself last unless `_self_` places it), then
values resolved one key at a time, so a key that is dropped anyway never needs its `${oc.env:...}` variable.

A defaults entry whose file is missing (ROLL's tree at commit 8eb27cc names `deepspeed_zero*.yaml` files it
does not have) is recorded, not fatal: the keys that interpolate it fail one by one and the migration report
names each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll_pipeline.config.compose import describe_resolution_error

__all__ = ["MISSING", "RollFile", "load_roll_file", "parse_device_mapping"]

MISSING = object()
"""The value of a key whose interpolation cannot be resolved (see `RollFile.value`)."""

_RANGE = re.compile(
    r"^\s*(?:list\()?\s*range\(\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?(?:,\s*(-?\d+)\s*)?\)\s*\)?\s*$"
)


@dataclass
class RollFile:
    """A composed, unresolved ROLL config and what composing it found missing."""

    path: Path
    config: Any  # omegaconf.DictConfig
    missing_defaults: list[str] = field(default_factory=list)
    errors: dict[tuple[str, ...], str] = field(default_factory=dict)

    def node(self, keys: tuple[str, ...]) -> Any:
        """The node at `keys` (a DictConfig, ListConfig or value node; an interpolation of a mapping is
        followed), or MISSING."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        node = self.config
        for depth, key in enumerate(keys):
            if not OmegaConf.is_dict(node) or key not in node:
                return MISSING
            child = node._get_node(key)
            if _is_interpolation(child):
                try:
                    resolved = node[key]
                except OmegaConfBaseException as exc:
                    self.errors[keys[: depth + 1]] = describe_resolution_error(exc)
                    return MISSING
                child = resolved if OmegaConf.is_config(resolved) else child
            node = child
        return node

    def value(self, keys: tuple[str, ...]) -> Any:
        """The resolved plain value at `keys` (mappings and lists as dict / list), MISSING when it is absent or
        cannot be resolved; the reason of a failure is kept in `errors[keys]`."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        parent = self.node(keys[:-1]) if keys else MISSING
        if not OmegaConf.is_dict(parent) or keys[-1] not in parent:
            if keys[:-1] in self.errors:
                self.errors[keys] = self.errors[keys[:-1]]
            return MISSING
        try:
            value = parent[keys[-1]]
            if OmegaConf.is_config(value):
                value = OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as exc:
            self.errors[keys] = describe_resolution_error(exc)
            return MISSING
        return value

    def keys_at(self, keys: tuple[str, ...]) -> list[str]:
        """The child keys of the mapping at `keys` (empty when it is no mapping)."""
        from omegaconf import OmegaConf

        node = self.node(keys)
        return [str(k) for k in node] if OmegaConf.is_dict(node) else []

    def is_mapping(self, keys: tuple[str, ...]) -> bool:
        """Whether the node at `keys` is a mapping (unresolved: an interpolation of a mapping counts)."""
        from omegaconf import OmegaConf

        return OmegaConf.is_dict(self.node(keys))


def _is_interpolation(node: Any) -> bool:
    return hasattr(node, "_is_interpolation") and node._is_interpolation()


def _defaults_entries(raw: Any, path: Path) -> list[str]:
    if raw is None:
        return ["_self_"]
    if not isinstance(raw, list) or not all(isinstance(e, str) for e in raw):
        raise ValueError(
            f"{path}: expected `defaults` to be a list of 'PATH@_here_' strings, got {raw!r}; write each entry"
            " as a string"
        )
    return raw if "_self_" in raw else [*raw, "_self_"]


def _entry_file(entry: str, folder: Path) -> tuple[Path, str]:
    """(file, package) of a defaults entry such as `../config/traj_envs@_here_`."""
    name, _, package = entry.partition("@")
    file = folder / name
    if file.suffix != ".yaml":
        file = file.with_name(file.name + ".yaml")
    return file, package or "_here_"


def load_roll_file(path: str | Path, *, primary: bool = True) -> RollFile:
    """Compose a ROLL YAML file with its defaults (unresolved). Raises ValueError for an empty primary file
    (an empty defaults file adds nothing, as in Hydra), a file that is no mapping, or a defaults entry placed
    under a package other than `_here_`."""
    import yaml
    from hydra.core.utils import setup_globals
    from omegaconf import OmegaConf

    setup_globals()  # Hydra's resolvers (`${now:...}`), as ROLL's launcher has them
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if not text.strip() and primary:
        raise ValueError(f"{path} is empty: there is nothing to migrate")
    raw = yaml.safe_load(text) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a YAML mapping of config keys, got {type(raw).__name__}")
    own = OmegaConf.create({k: v for k, v in raw.items() if k != "defaults"})
    merged, missing = OmegaConf.create({}), []
    for entry in _defaults_entries(raw.get("defaults"), path):
        if entry == "_self_":
            merged = OmegaConf.merge(merged, own)
            continue
        file, package = _entry_file(entry, path.parent)
        if package != "_here_":
            raise ValueError(
                f"{path}: defaults entry {entry!r} places a file under package {package!r}; roll migrate"
                " reads `PATH@_here_` entries (ROLL's agentic files use only these)"
            )
        if not file.is_file():
            missing.append(f"{entry} ({file})")
            continue
        merged = OmegaConf.merge(merged, load_roll_file(file, primary=False).config)
    return RollFile(path, merged, missing)


def parse_device_mapping(value: Any) -> list[int] | None:
    """ROLL's device_mapping as a list of GPU indices: a list, or a string `list(range(a,b))`, `range(a,b)`,
    `[0, 1]` or `0,1`; None when it is none of these."""
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value
    if not isinstance(value, str):
        return None
    found = _RANGE.match(value)
    if found:
        start, stop, step = found.groups()
        if stop is None:
            start, stop = "0", start
        return list(range(int(start), int(stop), int(step or 1)))
    parts = [p.strip() for p in value.strip().strip("[]").split(",") if p.strip()]
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None
