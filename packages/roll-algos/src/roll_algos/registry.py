"""The advantage-estimator registry (`register_estimator`, `estimator_spec`, `registered_estimators`) and
its one caller, `compute_advantages`.

One call shape for the whole family: `fn(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput`
(two positional arguments, synchronous). `compute_advantages(name, inputs, config)` is the one caller; it
runs, in order: input validation -> reward clipping (`reward_clip`) -> the estimator -> optional whitening
over valid tokens (`whiten`) -> advantage clipping (`advantage_clip`) -> zero off the mask, so an estimator
does only its own maths. Each registration declares what the estimator needs (`EstimatorSpec`), so callers
decide from the declaration, never from the name: whether a critic must run, the unit credit is given to,
whether it compares the trajectories of an env group, and which estimator-specific `AdvantageConfig`
fields it reads.

Installed packages add estimators through the entry-point group `roll_algos.estimators`; each entry
names a module whose import registers its estimators (loaded on the first lookup that misses):

    [project.entry-points."roll_algos.estimators"]
    my_estimators = "my_pkg.estimators"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal, get_args

from roll_algos.advantages import AdvantageConfig, AdvantageInputs, AdvantageOutput, validate_inputs
from roll_algos.errors import AlgosError
from roll_algos.plugins import Registry
from roll_algos.rewards import clip_advantages, clip_rewards, masked_whiten

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ENTRY_POINT_GROUP",
    "ESTIMATOR_REGISTRY",
    "EstimatorFn",
    "EstimatorLevel",
    "EstimatorSpec",
    "compute_advantages",
    "estimator_spec",
    "get_estimator",
    "load_estimator_plugins",
    "register_estimator",
    "registered_estimators",
]

EstimatorFn = Callable[[AdvantageInputs, AdvantageConfig], AdvantageOutput]
EstimatorLevel = Literal["token", "step", "trajectory"]
ENTRY_POINT_GROUP = "roll_algos.estimators"
"""The Python entry-point group through which installed packages register estimators."""

HOW_TO_REGISTER = (
    "Register one with `@roll_algos.register_estimator(name, level=..., group_based=...)` in a module that"
    f" an installed package lists under the entry-point group {ENTRY_POINT_GROUP!r} (docs/algos/registry.md)."
)
_LEVELS: tuple[str, ...] = get_args(EstimatorLevel)
_SHAPE = ("(AdvantageInputs, AdvantageConfig)", "AdvantageOutput")


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator and what it declares it needs.

    Attributes:
        name: the `adv_estimator` value.
        fn: `fn(inputs, config) -> AdvantageOutput`.
        level: the unit credit is assigned to: `token` (a value per response token, e.g. gae), `step`
            (one per agent turn, e.g. gigpo) or `trajectory` (one per episode, e.g. grpo).
        group_based: compares the trajectories of one env group (a baseline or normalisation per group).
        needs_critic: reads `AdvantageInputs.values`, so the caller must run a critic.
        options: the estimator-specific `AdvantageConfig` fields it reads (e.g. `gigpo_step_weight`);
            the shared ones (gamma, norm_mode, epsilon, whiten, clips) are read by every estimator.
        description: one line (the first of `fn`'s docstring).
    """

    name: str
    fn: EstimatorFn
    level: EstimatorLevel
    group_based: bool
    needs_critic: bool = False
    options: tuple[str, ...] = ()
    description: str = ""


ESTIMATOR_REGISTRY: Registry[EstimatorSpec] = Registry(
    "advantage estimator", "register_estimator", ENTRY_POINT_GROUP, _SHAPE, HOW_TO_REGISTER
)
"""The estimators' `Registry` (plugins load on the first lookup that misses)."""

ADVANTAGE_ESTIMATORS: dict[str, EstimatorSpec] = ESTIMATOR_REGISTRY.entries
"""Name -> `EstimatorSpec` of every registered estimator (add with `register_estimator`)."""


def register_estimator(
    name: str,
    *,
    level: EstimatorLevel,
    group_based: bool,
    needs_critic: bool = False,
    options: tuple[str, ...] = (),
    replace: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator: register `fn(inputs, config) -> AdvantageOutput` under `name` (see `EstimatorSpec`).

    Raises `AlgosError` on a malformed name, a name already taken (unless `replace`), an unknown level or
    option, or a function that cannot be called as `fn(inputs, config)`.

    Example (docs/algos/registry.md has a runnable one)::

        @register_estimator("raw_score", level="trajectory", group_based=False)
        def raw_score(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
            adv = inputs.episode_scores[:, None] * inputs.response_mask
            return AdvantageOutput(adv, adv.clone())
    """
    key = ESTIMATOR_REGISTRY.key(name)
    if level not in _LEVELS:
        raise AlgosError(f"register_estimator({key!r}): expected level in {list(_LEVELS)}, got {level!r}.")
    known = {f.name for f in fields(AdvantageConfig)}
    ESTIMATOR_REGISTRY.check_options(
        key, options, known, "AdvantageConfig fields", f"valid fields: {sorted(known)}"
    )
    return ESTIMATOR_REGISTRY.decorator(
        key,
        lambda fn, doc: EstimatorSpec(
            key, fn, level, bool(group_based), bool(needs_critic), tuple(options), doc
        ),
        replace,
    )


load_estimator_plugins = ESTIMATOR_REGISTRY.load_plugins
registered_estimators = ESTIMATOR_REGISTRY.names
estimator_spec = ESTIMATOR_REGISTRY.get


def get_estimator(name: str) -> EstimatorFn:
    """The registered estimator function of `name` (raises `AlgosError` listing the registered names)."""
    return estimator_spec(name).fn


def compute_advantages(
    estimator: str,
    inputs: AdvantageInputs,
    config: AdvantageConfig | None = None,
) -> AdvantageOutput:
    """Advantages and returns [B, T] with the named estimator (the steps: see the module docstring).

    Args:
        estimator: a registered estimator's name (e.g. "grpo", an `AdvantageEstimator`, or one added
            with `register_estimator`).
        inputs: `AdvantageInputs` of B rows x T tokens.
        config: `AdvantageConfig`; None uses the defaults.
    Returns:
        `AdvantageOutput(advantages [B, T], returns [B, T])`, both zero off the response mask.
    """
    config = config or AdvantageConfig()
    fn = get_estimator(estimator)
    validate_inputs(inputs)
    if config.reward_clip is not None:
        inputs = inputs._replace(
            token_rewards=clip_rewards(inputs.token_rewards, config.reward_clip),
            step_rewards=clip_rewards(inputs.step_rewards, config.reward_clip),
            episode_scores=clip_rewards(inputs.episode_scores, config.reward_clip),
        )
    out = fn(inputs, config)
    mask = inputs.response_mask
    adv = out.advantages
    if config.whiten:
        adv = masked_whiten(adv, mask, eps=config.epsilon)
    adv = clip_advantages(adv, config.advantage_clip)
    fmask = mask.to(adv.dtype)
    return AdvantageOutput(advantages=adv * fmask, returns=out.returns * fmask)
