"""The migration itself: `migrate_file` reads a ROLL config, applies the rule table key by key and returns the
roll config (a plain mapping) with its `MigrationReport`.

Order: the handlers that read several ROLL keys together run first (algorithm, KL, clipping, old log-probs,
lengths, sampling); then every other key of the composed ROLL file is walked and matched against
`rules.RULES`; then ROLL's defaults that the file left out are written where roll's differ. Each ROLL key
lands in exactly one section of the report, so nothing is dropped silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roll_pipeline.migrate.convert import CONVERTERS, Refused
from roll_pipeline.migrate.load import MISSING, RollFile, load_roll_file
from roll_pipeline.migrate.report import Change, Dropped, MigrationError, MigrationReport
from roll_pipeline.roll_keys.rules import (
    IGNORED_REASON,
    NO_DEFAULT,
    ROLES,
    RULES,
    Rule,
    match_rule,
)
from roll_pipeline.roll_keys.upstream import ROLL_FIELDS

__all__ = ["Migration", "is_neutral", "migrate_file", "to_yaml"]

Keys = tuple[str, ...]


def _dotted(keys: Keys | str) -> str:
    return keys if isinstance(keys, str) else ".".join(keys)


def _get(mapping: dict[str, Any], key: str) -> Any:
    node: Any = mapping
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    """Whether `value` is one of `neutral` (numbers compare by value, but a bool is never a number)."""
    for n in neutral:
        both_numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, n))
        if value is n or ((type(value) is type(n) or both_numbers) and value == n):
            return True
    return False


class Migration:
    """The state of one migration: the ROLL file, the roll config being built and the report."""

    def __init__(self, file: RollFile) -> None:
        from roll_pipeline.config.schema import default_values

        self.file = file
        self.out: dict[str, Any] = {}
        self.report = MigrationReport(str(file.path))
        self.done: set[Keys] = set()
        self.roll_defaults = default_values()
        self.uses_reference = False
        self.uses_critic = False
        self.sampling_section: Keys | None = None  # the generating_args ROLL samples with

    # ROLL side
    def roll(self, *keys: str) -> Any:
        """ROLL's resolved value at `keys` (MISSING when absent or unresolvable)."""
        return self.file.value(tuple(keys))

    def roll_or(self, default: Any, *keys: str) -> Any:
        """ROLL's resolved value at `keys`, or `default` (ROLL's default) when the file leaves it out."""
        value = self.roll(*keys)
        return default if value is MISSING or value is None else value

    def present(self, *keys: str) -> bool:
        """Whether the ROLL file sets `keys` (even to null)."""
        return self.file.node(tuple(keys)) is not MISSING

    # roll side
    def set(self, key: str, value: Any) -> None:
        """Write roll's `key` (dotted) in the output config."""
        *parents, last = key.split(".")
        node = self.out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def roll_default(self, key: str) -> Any:
        """roll's default at `key` (MISSING where the schema has none, e.g. inside custom_envs)."""
        return _get(self.roll_defaults, key)

    def output(self, key: str) -> Any:
        """roll's value at `key` (dotted) in the output config, MISSING when nothing set it."""
        return _get(self.out, key)

    def is_set(self, key: str) -> bool:
        """Whether the output already sets roll's `key`."""
        return _get(self.out, key) is not MISSING

    # report
    def _claim(self, keys: Keys | str) -> str:
        if isinstance(keys, tuple):
            self.done.add(keys)
        return _dotted(keys)

    def translate(self, keys: Keys | str, key: str, source_value: Any, value: Any, why: str = "") -> None:
        """`keys` (ROLL) became roll's `key` = `value`; a changed form is also listed under converted."""
        name = self._claim(keys)
        if value is not MISSING:
            self.set(key, value)
        self.report.translated.append(Change(name, key))
        if why or (source_value != value and value is not MISSING):
            shown = "(roll's default)" if value is MISSING else value
            self.report.converted.append(Change(name, key, source_value, shown, why))

    def default(self, key: str, value: Any, why: str = "") -> None:
        """Set roll's `key` to ROLL's default `value` when roll's own default differs (and nothing set it)."""
        ours = self.roll_default(key)
        if self.is_set(key) or value == ours:
            return
        self.set(key, value)
        self.report.defaults.append(Change("(default)", key, value, value, why, roll_default=ours))

    def drop(self, keys: Keys | str, why: str) -> None:
        """`keys` has no effect in roll (or in ROLL either)."""
        self.report.dropped.append(Dropped(self._claim(keys), why))

    def approximate(self, keys: Keys | str, why: str) -> None:
        """roll does what `keys` asks its own way (the results can differ in detail)."""
        self.report.approximated.append(Dropped(self._claim(keys), why))

    def unsupported(self, keys: Keys | str, why: str) -> None:
        """`keys` changes what is trained and roll cannot do it."""
        self.report.unsupported.append(Dropped(self._claim(keys), why))

    def claim_all(self, keys: Keys) -> None:
        """Mark `keys` and everything below it as reported."""
        self.done.add(keys)
        for child in self.file.keys_at(keys):
            self.claim_all((*keys, child))

    # rules
    def value_or_refuse(self, keys: Keys) -> Any:
        """ROLL's value at `keys`, or MISSING after reporting why it does not resolve."""
        value = self.file.value(keys)
        if value is MISSING:
            self.unsupported(keys, self.file.errors.get(keys, "the value does not resolve"))
        return value

    def apply(self, keys: Keys, rule: Rule, captures: list[str]) -> None:
        """Apply `rule` (matched on `keys`, or on the path `walk` read them under) to the ROLL key `keys`."""
        from roll_pipeline.migrate.handlers import HANDLERS

        if rule.kind == "handler":
            HANDLERS[rule.target](self, keys, captures)
        elif rule.kind == "drop":
            self.drop(keys, rule.reason)
        elif rule.kind == "approximate":
            self.approximate(keys, rule.reason)
        elif rule.kind == "unsupported":
            value = self.value_or_refuse(keys)
            if value is MISSING:
                return
            if is_neutral(value, rule.neutral):
                self.drop(keys, f"{value!r} is ROLL's no-op value here ({rule.reason})")
            else:
                self.unsupported(keys, rule.reason)
        else:
            self.rename(keys, rule, captures)

    def rename(self, keys: Keys, rule: Rule, captures: list[str]) -> None:
        """A `rename` rule: convert ROLL's value and write it under the rule's target."""
        value = self.value_or_refuse(keys)
        if value is MISSING:
            return
        try:
            converted = CONVERTERS[rule.convert](value, self)
        except Refused as exc:
            self.unsupported(keys, str(exc))
            return
        self.translate(
            keys, rule.target.format(*captures), value, converted.value, converted.why or rule.reason
        )

    def walk(self, keys: Keys = (), rule_prefix: Keys | None = None) -> None:
        """Match every not yet reported key below `keys` against the rules (as `rule_prefix` + key when given:
        sections read under another name, e.g. an env manager's generating_args as `generating_args`)."""
        for key in self.file.keys_at(keys):
            path = (*keys, key)
            if path in self.done:
                continue
            rule_keys = (*rule_prefix, key) if rule_prefix is not None else path
            found = match_rule(rule_keys)
            if found is not None:
                self.apply(path, *found)
            elif not keys and key not in ROLL_FIELDS:
                self.claim_all(path)
                self.drop(path, IGNORED_REASON)
            elif self.file.is_mapping(path):
                self.walk(path, rule_keys if rule_prefix is not None else None)
            else:
                self.unsupported(
                    path,
                    "no migration rule knows this ROLL key; remove it, or map it by hand and migrate again",
                )

    def active_roles(self, pattern_segment: str) -> list[str]:
        """The worker sections a `<role>` / `<trained>` default rule applies to in this run."""
        roles = [
            r
            for r in ROLES
            if r in ("actor_train", "actor_infer")
            or (r == "reference" and self.uses_reference)
            or (r == "critic" and self.uses_critic)
        ]
        return [r for r in roles if pattern_segment == "<role>" or r in ("actor_train", "critic")]

    def rule_defaults(self) -> None:
        """ROLL's defaults of `rename` rules whose key the file leaves out, where roll's default differs."""
        for rule in RULES:
            if rule.kind != "rename" or rule.roll_default is NO_DEFAULT:
                continue
            first, *rest = rule.pattern.split(".")
            if first in ("<role>", "<trained>"):
                expansions = [((r,), [r]) for r in self.active_roles(first)]
            elif first == "*_env_manager":
                expansions = [((f"{w}_env_manager",), [w]) for w in ("train", "val")]
            elif first == "generating_args":
                expansions = [(self.sampling_section, [])] if self.sampling_section else []
            else:
                expansions = [((first,), [])]
            for head, captures in expansions:
                keys = (*head, *rest)
                if self.present(*keys):
                    continue
                converted = CONVERTERS[rule.convert](rule.roll_default, self)
                if converted.value is not MISSING:
                    self.default(rule.target.format(*captures), converted.value)


def migrate_file(
    path: str | Path, *, drop_unsupported: bool = False
) -> tuple[dict[str, Any], MigrationReport]:
    """Translate the ROLL agentic config at `path` into a roll config mapping (the keys of a YAML file that
    starts from `roll_defaults`) and its report.

    Raises:
        MigrationError: the file does not load, or (without `drop_unsupported`) it has settings that change
            what is trained and roll cannot honour; `exc.report` holds the report when there is one.
    """
    from roll_pipeline.migrate.handlers import FIRST, finish

    try:
        file = load_roll_file(path)
    except (OSError, ValueError) as exc:
        raise MigrationError(f"{path}: {exc}") from exc
    m = Migration(file)
    for entry in file.missing_defaults:
        m.unsupported(
            "defaults",
            f"defaults entry {entry} is not there: ROLL cannot compose this file either, and every key that"
            " interpolates it is missing",
        )
    m.done.add(("defaults",))
    for handler in FIRST:
        handler(m)
    m.walk()
    m.rule_defaults()
    finish(m)
    if m.report.unsupported and not drop_unsupported:
        error = m.report.error()
        error.report = m.report  # type: ignore[attr-defined]
        raise error
    return m.out, m.report


def to_yaml(config: dict[str, Any], source: str) -> str:
    """The migrated config as a roll YAML file: a header naming the source, `defaults: [roll_defaults, _self_]`
    (roll's defaults under what ROLL's file set), then the keys."""
    import yaml

    head = (
        f"# Migrated from the ROLL config {source} by `roll migrate`; the report it printed lists every ROLL key\n"
        "# and what became of it. Check it with `roll config --config-path DIR --config-name NAME`.\n"
    )
    body = yaml.safe_dump(
        {"defaults": ["roll_defaults", "_self_"], **_ordered(config)}, sort_keys=False, allow_unicode=True
    )
    return head + body


def _by_fields(mapping: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    rank = {name: i for i, name in enumerate(fields)}
    return dict(sorted(mapping.items(), key=lambda item: rank.get(item[0], len(rank))))


def _ordered(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with its keys in the schema's field order (top level, worker sections, env tags)."""
    from roll_pipeline.config.envs import CustomEnvConfig
    from roll_pipeline.config.roles import WorkerConfig
    from roll_pipeline.config.schema import AgenticConfig

    out = _by_fields(config, list(AgenticConfig.model_fields))
    for role in ROLES:
        if isinstance(out.get(role), dict):
            out[role] = _by_fields(out[role], list(WorkerConfig.model_fields))
    for tag, entry in (out.get("custom_envs") or {}).items():
        out["custom_envs"][tag] = _by_fields(entry, list(CustomEnvConfig.model_fields))
    return out
