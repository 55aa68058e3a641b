"""The policy-loss registry (`register_policy_loss`, `policy_loss_spec`, `get_policy_loss`,
`registered_policy_losses`), its one caller `compute_policy_loss`, and the builtin `ppo` loss, the default.

One call shape for the whole family: `fn(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput`
(two positional arguments, synchronous). `ActorLoss` (the objective a train worker runs) runs its
`policy_loss` by name through `compute_policy_loss` and adds the KL and entropy terms itself. Each registration
declares which of the loss-specific `PolicyLossConfig` fields it reads (`options`), so a setting that a loss would ignore is
refused instead. GSPO (`roll_algos.gspo`) registers as `gspo`.

Installed packages add losses through the entry-point group `roll_algos.policy_losses`; each entry names a
module whose import registers its losses (loaded on the first lookup that misses):

    [project.entry-points."roll_algos.policy_losses"]
    my_losses = "my_pkg.losses"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch

from roll_algos.errors import AlgosError
from roll_algos.losses import LossAggMode, PolicyLossOutput, check_policy_loss_args, policy_loss
from roll_algos.plugins import Registry, where

__all__ = [
    "DEFAULT_POLICY_LOSS",
    "POLICY_LOSSES",
    "POLICY_LOSS_ENTRY_POINT_GROUP",
    "POLICY_LOSS_OPTIONS",
    "POLICY_LOSS_REGISTRY",
    "PolicyLossConfig",
    "PolicyLossFn",
    "PolicyLossInputs",
    "PolicyLossSpec",
    "check_policy_loss_config",
    "compute_policy_loss",
    "get_policy_loss",
    "load_policy_loss_plugins",
    "policy_loss_spec",
    "ppo",
    "register_policy_loss",
    "registered_policy_losses",
]

DEFAULT_POLICY_LOSS = "ppo"
"""The policy loss of `ActorLoss` and of a config that names none."""

POLICY_LOSS_ENTRY_POINT_GROUP = "roll_algos.policy_losses"
"""The Python entry-point group through which installed packages register policy losses."""

POLICY_LOSS_OPTIONS = ("dual_clip", "ratio_level")
"""The `PolicyLossConfig` fields only a loss declaring them reads; every loss reads the others."""

HOW_TO_REGISTER = (
    "Register one with `@roll_algos.register_policy_loss(name)` on a function fn(inputs: PolicyLossInputs,"
    " config: PolicyLossConfig) -> PolicyLossOutput, in a module that an installed package lists under the"
    f" entry-point group {POLICY_LOSS_ENTRY_POINT_GROUP!r} (docs/algos/policy_loss.md)."
)


_SHAPE = ("(PolicyLossInputs, PolicyLossConfig)", "PolicyLossOutput")


class PolicyLossInputs(NamedTuple):
    """The tensors of one micro-batch of B rows x T tokens.

    Attributes:
        log_probs: [B, T] the current policy's log-probs of the sampled tokens (differentiable).
        old_log_probs: [B, T] log-probs of the policy that produced the advantages (no gradient taken).
        advantages: [B, T] per-token advantages.
        response_mask: [B, T] bool, the tokens the loss trains on.
        segment_ids: [B, T] the segment (turn) of each token, for `ratio_level="segment"`; None: contiguous
            runs of the mask.
        rollout_log_probs: [B, T] the sampler's log-probs; when given, each token's loss is weighted by the
            truncated importance weight min(exp(old - rollout), tis_cap).
    """

    log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor
    segment_ids: torch.Tensor | None = None
    rollout_log_probs: torch.Tensor | None = None

    def check(self, caller: str, config: PolicyLossConfig) -> None:
        """Raise `ShapeError` unless every tensor is [B, T] like `log_probs`, `AlgosError` on a negative clip
        range (for a loss without a dual clip); messages start with `caller`."""
        check_policy_loss_args(
            caller,
            *self[:4],
            rollout_log_probs=self.rollout_log_probs,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            dual_clip=None,
        )


@dataclass(frozen=True)
class PolicyLossConfig:
    """The settings of a policy loss (the defaults are `policy_loss`'s).

    Attributes:
        clip_low, clip_high: the (asymmetric) clip range of the importance ratio: [1 - clip_low, 1 + clip_high].
        dual_clip: c > 1 caps the loss of negative advantages at -A * c; None: off (option).
        agg_mode: a `LossAggMode` value, how the [B, T] token losses become a scalar.
        ratio_level: `token`, `segment` or `sequence` (option; docs/algos/policy_loss.md).
        tis_cap: truncation of the importance weight of `rollout_log_probs`; None: untruncated.
        norm_constant: divisor of `seq-mean-token-sum-norm`; None: T.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg_mode: str = LossAggMode.SEQ_MEAN_TOKEN_MEAN.value
    ratio_level: str = "token"
    tis_cap: float | None = None
    norm_constant: float | None = None


PolicyLossFn = Callable[[PolicyLossInputs, PolicyLossConfig], PolicyLossOutput]


@dataclass(frozen=True)
class PolicyLossSpec:
    """A registered policy loss.

    Attributes:
        name: the name `ActorLoss.policy_loss` and the config's `policy_loss` take.
        fn: `fn(inputs, config) -> PolicyLossOutput`.
        options: the `POLICY_LOSS_OPTIONS` it reads (ppo: dual_clip, ratio_level).
        description: one line (the first of `fn`'s docstring).
    """

    name: str
    fn: PolicyLossFn
    options: tuple[str, ...] = ()
    description: str = ""

    def unread(self, config: PolicyLossConfig) -> list[str]:
        """The options `config` sets away from their default that this loss does not read."""
        default = PolicyLossConfig()
        return [
            o
            for o in POLICY_LOSS_OPTIONS
            if o not in self.options and getattr(config, o) != getattr(default, o)
        ]


POLICY_LOSS_REGISTRY: Registry[PolicyLossSpec] = Registry(
    "policy loss", "register_policy_loss", POLICY_LOSS_ENTRY_POINT_GROUP, _SHAPE, HOW_TO_REGISTER
)
"""The policy losses' `Registry` (plugins load on the first lookup that misses)."""

POLICY_LOSSES: dict[str, PolicyLossSpec] = POLICY_LOSS_REGISTRY.entries
"""Name -> `PolicyLossSpec` of every registered policy loss (add with `register_policy_loss`)."""


def register_policy_loss(
    name: str, *, options: tuple[str, ...] = (), replace: bool = False
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register `fn(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput`.

    Args:
        name: the name configs use (letters, digits, '_', '.', '-', starting with a letter).
        options: the `POLICY_LOSS_OPTIONS` the loss reads; a config setting another one is refused.
        replace: override an existing registration (a taken name is an error otherwise).
    Raises `AlgosError` on a malformed or taken name, an unknown option, or a function that cannot be
    called as `fn(inputs, config)` (a coroutine, a class, another arity).

    Example (docs/algos/policy_loss.md has a runnable one)::

        @register_policy_loss("ppo_higher")
        def ppo_higher(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput:
            return get_policy_loss("ppo")(inputs, dataclasses.replace(config, clip_high=0.28))
    """
    key = POLICY_LOSS_REGISTRY.key(name)
    shared = f"the other PolicyLossConfig fields ({_shared()}) are read by every loss"
    POLICY_LOSS_REGISTRY.check_options(
        key, options, POLICY_LOSS_OPTIONS, str(list(POLICY_LOSS_OPTIONS)), shared
    )
    return POLICY_LOSS_REGISTRY.decorator(
        key, lambda fn, doc: PolicyLossSpec(key, fn, tuple(options), doc), replace
    )


def _shared() -> str:
    return ", ".join(f.name for f in fields(PolicyLossConfig) if f.name not in POLICY_LOSS_OPTIONS)


load_policy_loss_plugins = POLICY_LOSS_REGISTRY.load_plugins
registered_policy_losses = POLICY_LOSS_REGISTRY.names
policy_loss_spec = POLICY_LOSS_REGISTRY.get


def get_policy_loss(name: str) -> PolicyLossFn:
    """The registered policy-loss function of `name` (raises `AlgosError` listing the registered names)."""
    return policy_loss_spec(name).fn


def check_policy_loss_config(name: str, config: PolicyLossConfig) -> None:
    """Raise `AlgosError` when `config` sets an option the loss `name` does not read (it would do nothing)."""
    spec = policy_loss_spec(name)
    unread = spec.unread(config)
    if unread:
        readers = [n for n in registered_policy_losses() if set(unread) <= set(POLICY_LOSSES[n].options)]
        raise AlgosError(
            f"policy loss {name!r} does not read {unread} (it reads {list(spec.options) or 'none of them'});"
            f" leave them at their defaults, or pick a loss that reads them: {readers}."
        )


def compute_policy_loss(
    name: str, inputs: PolicyLossInputs, config: PolicyLossConfig | None = None
) -> PolicyLossOutput:
    """The registered policy loss `name` on `inputs` [B, T] with `config` (None: the defaults).

    Refuses a config option the loss does not read (`check_policy_loss_config`) and a result that is no
    `PolicyLossOutput`; the loss itself validates its inputs.
    """
    config = config or PolicyLossConfig()
    check_policy_loss_config(name, config)
    out = get_policy_loss(name)(inputs, config)
    if not isinstance(out, PolicyLossOutput):
        raise AlgosError(
            f"policy loss {name!r} ({where(get_policy_loss(name))}) returned {type(out).__name__}; a policy loss"
            " returns roll_algos.PolicyLossOutput (`clipped_policy_loss` builds one from an importance ratio)."
        )
    return out


@register_policy_loss(DEFAULT_POLICY_LOSS, options=POLICY_LOSS_OPTIONS)
def ppo(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput:
    """PPO clipped surrogate (asymmetric / dual clip; token, segment or sequence ratios; TIS).

    `policy_loss` on the inputs and settings: l_t = max(-A_t r_t, -A_t clip(r_t, 1 - clip_low, 1 + clip_high)),
    capped at -A_t * dual_clip for A_t < 0, weighted by the TIS weight, aggregated over `response_mask`
    with `agg_mode`.
    """
    # the fields of PolicyLossInputs and PolicyLossConfig are policy_loss's arguments, one to one
    return policy_loss(**inputs._asdict(), **asdict(config))
