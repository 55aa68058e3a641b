"""Registry: make/list/spec, config errors that name env, field and allowed values, close-match hints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import roll_envs
from pydantic import Field
from roll_envs import registry
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.config import EnvConfig


class CounterConfig(EnvConfig):
    target: int = Field(3, ge=1, description="count to reach")


class CounterEnv(BaseEnv):
    """Count up to a target: the smallest env an author could write."""

    config_cls = CounterConfig

    @property
    def instruction(self) -> str:
        return "Say <answer>Inc</answer> until the counter reaches the target."

    @property
    def valid_actions(self) -> list[str]:
        return ["Inc", "Dec"]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.count = int(rng.integers(0, 2))

    def apply_action(self, action: str) -> ActionOutcome:
        self.count += 1 if action == "Inc" else -1
        return ActionOutcome(float(self.is_success()), self.is_success(), True)

    def text_observation(self) -> str:
        return f"counter {self.count} target {self.config.target}"

    def is_success(self) -> bool:
        return self.count >= self.config.target


@pytest.fixture
def counter_id():
    registry.register("test_counter", CounterEnv, description="test env")
    yield "test_counter"
    registry._REGISTRY.pop("test_counter", None)


def test_builtins_are_listed_and_made_by_any_spelling():
    assert "frozen_lake" in roll_envs.list_envs()
    for spelling in ["frozen_lake", "FrozenLake", "frozen-lake", "FROZEN_LAKE"]:
        assert isinstance(roll_envs.make(spelling), roll_envs.FrozenLakeEnv)


def test_unknown_id_suggests_close_matches():
    with pytest.raises(roll_envs.UnknownEnvError, match="Did you mean 'frozen_lake'"):
        roll_envs.make("frozen_lak")
    with pytest.raises(LookupError, match="Registered:"):
        roll_envs.make("zzz")


def test_config_errors_name_env_field_and_allowed_values():
    with pytest.raises(roll_envs.EnvConfigError) as err:
        roll_envs.make("frozen_lake", sise=5)
    msg = str(err.value)
    assert (
        "'frozen_lake'" in msg
        and "'sise'" in msg
        and "Did you mean 'size'" in msg
        and "Allowed fields" in msg
    )
    with pytest.raises(ValueError, match=r"field 'p'.*got 1.5"):
        roll_envs.make("frozen_lake", p=1.5)
    with pytest.raises(roll_envs.EnvConfigError, match="render_mode"):
        roll_envs.make("frozen_lake", render_mode="human")


def test_register_validates_ids_and_entry_points(counter_id):
    with pytest.raises(roll_envs.RegistrationError, match="module:ClassName"):
        roll_envs.register("bad_ep", "no_colon_here")
    with pytest.raises(roll_envs.RegistrationError, match="already registered"):
        roll_envs.register(counter_id, "other.module:Env")
    with pytest.raises(roll_envs.RegistrationError, match="not valid"):
        roll_envs.register("1 bad id", CounterEnv)
    roll_envs.register("broken_ep", "roll_envs.nowhere:Env")
    try:
        with pytest.raises(roll_envs.RegistrationError, match="does not load"):
            roll_envs.make("broken_ep")
    finally:
        registry._REGISTRY.pop("broken_ep", None)


@pytest.mark.parametrize("kind", ["env", "namespace"])
def test_envs_and_namespaces_refuse_a_bad_name_an_entry_point_that_is_no_class_or_a_taken_name(kind):
    """`register` and `register_namespace` refuse the same mistakes, each naming what it registers."""
    table = registry._REGISTRY if kind == "env" else registry._NAMESPACES

    def add(name: Any, entry_point: Any) -> Any:
        if kind == "env":
            return roll_envs.register(name, entry_point)
        return roll_envs.register_namespace(name, entry_point, id_field="target")

    for name, entry_point, refusal in (
        ("1 bad", CounterEnv, f"{kind}( id)? '1 bad' is not valid"),
        (None, CounterEnv, f"{kind}( id)? None is not valid"),
        ("test_taken", "no_colon_here", f"{kind} 'test_taken': entry point 'no_colon_here' is malformed"),
        ("test_taken", 42, f"{kind} 'test_taken': entry point must be a 'module:Class' string or a class"),
    ):
        with pytest.raises(roll_envs.RegistrationError, match=refusal):
            add(name, entry_point)
    assert "test_taken" not in table
    add("test_taken", CounterEnv)
    try:
        add("test_taken", CounterEnv)  # the same entry point again: no conflict
        with pytest.raises(roll_envs.RegistrationError, match=r"already registered to .*pick another"):
            add("test_taken", "other.module:Env")
    finally:
        table.pop("test_taken", None)


def test_custom_env_through_registry_with_defaults(counter_id):
    env = roll_envs.make(counter_id, target=5)
    obs, info = env.reset(seed=0)
    assert "target 5" in obs and info["success"] is False
    total = 0.0
    for _ in range(6):
        _, reward, terminated, _, info = env.step("<answer>inc</answer>")
        total += reward
        if terminated:
            break
    assert info["success"] and total == 1.0
    roll_envs.register("counter_big", CounterEnv, defaults={"target": 9})
    try:
        assert roll_envs.make("counter_big").config.target == 9
        assert roll_envs.make("counter_big", target=2).config.target == 2
    finally:
        registry._REGISTRY.pop("counter_big", None)


def test_abstract_hooks_are_enforced():
    class Incomplete(BaseEnv):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()


def test_entry_point_plugins_are_loaded(monkeypatch):
    class FakeEP:
        name, value = "fake_plugin_env", "tests:CounterEnv"

        def load(self):
            return CounterEnv

    class BrokenEP:
        name, value = "broken_plugin", "nowhere:Nothing"

        def load(self):
            raise ImportError("No module named 'nowhere'")

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda group: [FakeEP(), BrokenEP()])
    try:
        with pytest.warns(UserWarning, match="broken_plugin"):
            errors = registry.load_plugins(force=True)
        assert "broken_plugin" in errors
        assert "fake_plugin_env" in roll_envs.list_envs()
        with pytest.raises(roll_envs.UnknownEnvError, match="failed to load"):
            roll_envs.make("no_such_env")
    finally:
        registry._REGISTRY.pop("fake_plugin_env", None)
        registry._plugin_errors.clear()


def test_builtins_are_registered_with_gymnasium():
    import gymnasium
    from roll_envs.envs.builtins import BUILTINS, GYM_NAMESPACE

    names = [b.gym_name for b in BUILTINS if b.gym_name]
    assert {
        "FrozenLake",
        "SimpleSokoban",
        "LargerSokoban",
        "SokobanDifferentGridVocab",
        "WebShopLite",
    } <= set(names)
    for name in names:
        env = gymnasium.make(f"{GYM_NAMESPACE}/{name}-v0")
        obs, info = env.reset(seed=1)
        assert env.observation_space.contains(obs) and "success" in info
        obs, *_ = env.step(f"<answer>{env.unwrapped.valid_actions[0]}</answer>")
        assert env.observation_space.contains(obs)
        env.close()
    vec = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("roll_envs/SimpleSokoban-v0")] * 3)
    obs, _ = vec.reset(seed=[0, 1, 2])
    assert len(set(obs)) == 3
    vec.close()
