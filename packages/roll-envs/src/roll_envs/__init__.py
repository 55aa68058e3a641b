"""roll-envs: Gym-like text environments SDK for training LLM agents (no torch, no Ray).

The SDK (`base`, `config`, `parsing`, `registry`, `checker`, ...) is the top level of the package; the
built-in games are in `roll_envs.envs`, the adapters of other env libraries in `roll_envs.adapters`
(the package README has a table of every module).

>>> import roll_envs
>>> env = roll_envs.make("frozen_lake")
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step("<answer>Left</answer>")
"""

from roll_envs.adapters.gym import GymAdapterConfig, GymAdapterEnv
from roll_envs.base import ActionOutcome, BaseEnv
from roll_envs.baseline_types import EnvBaselines
from roll_envs.baselines import env_baselines, has_baselines
from roll_envs.checker import check_env
from roll_envs.config import EnvConfig
from roll_envs.envs.builtins import register_builtins
from roll_envs.envs.four_choice import FourChoiceConfig, FourChoiceEnv, four_choice_baselines
from roll_envs.envs.frozen_lake import FrozenLakeConfig, FrozenLakeEnv, frozen_lake_neighbours
from roll_envs.envs.frozen_lake.baselines import frozen_lake_baselines
from roll_envs.envs.sokoban import SokobanConfig, SokobanEnv
from roll_envs.envs.sokoban.baselines import sokoban_baselines
from roll_envs.envs.webshop import WebShopLiteConfig, WebShopLiteEnv
from roll_envs.errors import (
    CheckEnvError,
    EnvConfigError,
    GarbagePaysWarning,
    IsolatedCallAbandoned,
    RegistrationError,
    ResetNeeded,
    RollEnvsError,
    UnknownEnvError,
)
from roll_envs.frames import caption_frame, filmstrip, grid_frame, replay_to_gif, save_gif, text_frame
from roll_envs.metrics import aggregate_metrics
from roll_envs.parsing import AnswerFormat, ParsedTurn, extract_answer, parse_turn, render_answer
from roll_envs.random_state import EnvRandomState, IsolatedEnv
from roll_envs.registry import (
    ENTRY_POINT_GROUP,
    EnvSpec,
    NamespaceSpec,
    list_envs,
    load_plugins,
    make,
    register,
    register_namespace,
    registered_namespaces,
    spec,
)
from roll_envs.tiles import Tile, tile_frame
from roll_envs.tool_calls import ToolCall

__version__ = "0.2.0"

register_builtins()

__all__ = [
    "ENTRY_POINT_GROUP",
    "ActionOutcome",
    "AnswerFormat",
    "BaseEnv",
    "CheckEnvError",
    "EnvBaselines",
    "EnvConfig",
    "EnvConfigError",
    "EnvRandomState",
    "EnvSpec",
    "FourChoiceConfig",
    "FourChoiceEnv",
    "FrozenLakeConfig",
    "FrozenLakeEnv",
    "GarbagePaysWarning",
    "GymAdapterConfig",
    "GymAdapterEnv",
    "IsolatedCallAbandoned",
    "IsolatedEnv",
    "NamespaceSpec",
    "ParsedTurn",
    "RegistrationError",
    "ResetNeeded",
    "RollEnvsError",
    "SokobanConfig",
    "SokobanEnv",
    "Tile",
    "ToolCall",
    "UnknownEnvError",
    "WebShopLiteConfig",
    "WebShopLiteEnv",
    "__version__",
    "aggregate_metrics",
    "caption_frame",
    "check_env",
    "env_baselines",
    "extract_answer",
    "filmstrip",
    "four_choice_baselines",
    "frozen_lake_baselines",
    "frozen_lake_neighbours",
    "grid_frame",
    "has_baselines",
    "list_envs",
    "load_plugins",
    "make",
    "parse_turn",
    "register",
    "register_namespace",
    "registered_namespaces",
    "render_answer",
    "replay_to_gif",
    "save_gif",
    "sokoban_baselines",
    "spec",
    "text_frame",
    "tile_frame",
]
