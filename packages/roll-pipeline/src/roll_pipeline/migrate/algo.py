"""Handlers of the algorithm's settings, each reading several ROLL keys together: the advantage estimator with
its reward normalisation and discounts, the KL terms, the PPO clip range, the old log-probs.

What ROLL's agentic pipeline does with each (8eb27cc): `reward_normalization` normalises the scores (grouping
`batch`: over the batch, any other grouping: within the env group) before the return is computed; grpo and
reinforce are then the same per-token discounted return with `gamma` (default 1); gigpo and step_reinforce
discount per env step with `step_reward_gamma` (0.95); the KL loss is always k3, and `kl_penalty` with
`init_kl_coef` only shapes a reward penalty that `add_token_level_kl: true` turns on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roll_pipeline.migrate.load import MISSING

if TYPE_CHECKING:
    from roll_pipeline.migrate.translate import Migration

__all__ = ["clip", "estimator", "kl", "recompute"]

_ESTIMATORS = {
    "grpo": ("grpo", ""),
    "reinforce": (
        "grpo",
        "ROLL's agentic reinforce is its grpo: the same reward normalisation, then the same discounted return",
    ),
    "gae": ("gae", ""),
    "gigpo": ("gigpo", ""),
    "step_reinforce": ("step_reinforce", ""),
    "agentic_reinforce": ("agentic_reinforce", ""),
}
_NORM_MODES = {("group", "group"): "mean_std", ("group", None): "mean", (None, None): "none"}


def _set_from(m: Migration, source_key: str, roll_default: Any, key: str, why: str = "") -> Any:
    """Translate `source_key` into roll's `key`, or write ROLL's default there when the file leaves it out;
    returns the value ROLL runs with."""
    if m.present(source_key):
        value = m.value_or_refuse((source_key,))
        if value is not MISSING:
            m.translate((source_key,), key, value, value, why)
        return value
    m.default(key, roll_default, why)
    return roll_default


def _drop_if_present(m: Migration, source_key: str, why: str) -> None:
    if m.present(source_key):
        m.drop((source_key,), why)


def _one_or_unsupported(m: Migration, source_key: str, unsupported: str, dropped: str) -> None:
    """A ROLL factor that roll fixes at 1: 1 (ROLL's default) is dropped with `dropped`, any other value is
    unsupported (the value, then `unsupported`)."""
    value = m.roll_or(1.0, source_key)
    if value != 1.0:
        m.unsupported((source_key,), f"{value}: {unsupported}")
    else:
        _drop_if_present(m, source_key, dropped)


def estimator(m: Migration) -> None:
    """adv_estimator, reward_normalization, gamma, lambd, step_reward_gamma and the GiGPO weights."""
    if m.present("adv_estimator"):
        name = m.value_or_refuse(("adv_estimator",))
        if name is MISSING:
            return
        target, why = _ESTIMATORS.get(name, (None, ""))
        if target is None:
            m.unsupported(
                ("adv_estimator",), f"{name!r}: roll has {sorted(set(_ESTIMATORS))} of ROLL's estimators"
            )
            return
        m.translate(("adv_estimator",), "adv_estimator", name, target, why)
    else:
        target = "gae"
        m.default("adv_estimator", target, "ROLL's default")
    m.uses_critic = target == "gae"
    _normalisation(m, target)
    _discounts(m, target)
    if target == "gigpo":
        _set_from(m, "step_reward_weight", 1.0, "gigpo_step_weight")
        _one_or_unsupported(
            m,
            "episode_reward_weight",
            "roll's gigpo weighs the episode advantage 1 (gigpo_step_weight scales the step one)",
            "1 is roll's weight of the episode advantage",
        )
    else:
        for key in ("step_reward_weight", "episode_reward_weight"):
            _drop_if_present(m, key, "only read by ROLL's gigpo")
    for key in ("norm_mean_type", "norm_std_type"):
        _drop_if_present(
            m, key, "read by ROLL's RLVR pipeline; its agentic one normalises by reward_normalization"
        )


def _derived(method: str, grouping: str) -> tuple[str | None, str | None]:
    """ROLL's norm_mean_type / norm_std_type derived from reward_normalization's method and grouping."""
    scope = "batch" if grouping == "batch" else "group"
    if method == "mean":
        return scope, None
    if method in ("mean_std", "asym_clip"):
        return scope, scope
    return None, None


def _normalisation(m: Migration, target: str) -> None:
    norm = m.roll("reward_normalization")
    norm = norm if isinstance(norm, dict) else {}
    grouping, method = norm.get("grouping", "batch"), norm.get("method", "identity")
    derived = _derived(method, grouping)
    mean_type = norm.get("norm_mean_type") or derived[0]
    std_type = norm.get("norm_std_type") or derived[1]
    mode = _NORM_MODES.get((mean_type, std_type))
    where: Any = (
        ("reward_normalization",) if m.present("reward_normalization") else "reward_normalization (default)"
    )
    if isinstance(where, tuple):
        m.claim_all(where)
    extra = [k for k in ("global_scale_factor", "global_shift_value") if norm.get(k) is not None]
    if mode is None or method == "asym_clip" or extra:
        what = (
            f"method {method}"
            if method == "asym_clip"
            else ", ".join(extra)
            or (
                f"the scores' mean over the {mean_type or 'nothing'} and std over the {std_type or 'nothing'}"
            )
        )
        m.unsupported(
            where,
            f"{what}: roll normalises scores within each env group only (norm_mean_type mean_std / mean / none)",
        )
        return
    if target in ("gae", "agentic_reinforce") and mode != "none":
        m.unsupported(
            where, f"score normalisation ({mode}) before {target}: roll's {target} reads the raw rewards"
        )
        return
    why = f"grouping {grouping}, method {method}: mean over the {mean_type}, std over the {std_type}"
    if isinstance(where, tuple):
        m.translate(where, "norm_mean_type", norm, mode, why)
    else:
        m.default(
            "norm_mean_type", mode, "ROLL's default reward_normalization (grouping batch, method identity)"
        )


def _discounts(m: Migration, target: str) -> None:
    if target in ("gigpo", "step_reinforce"):
        _set_from(m, "step_reward_gamma", 0.95, "gamma", "ROLL's discount per env step")
        _one_or_unsupported(
            m,
            "gamma",
            f"a per-token discount inside each turn; roll's {target} discounts per env step only",
            f"ROLL's per-token discount inside a turn, 1: roll's {target} has none",
        )
    else:
        _set_from(m, "gamma", 1.0, "gamma", "ROLL's discount per token")
        _drop_if_present(m, "step_reward_gamma", "only read by ROLL's gigpo / step_reinforce")
    if target == "gae":
        _set_from(m, "lambd", 0.95, "lambd")
    else:
        _drop_if_present(m, "lambd", "only gae reads it, in ROLL as in roll")


def kl(m: Migration) -> None:
    """use_kl_loss / kl_loss_coef (the loss term, k3 in ROLL) and add_token_level_kl / init_kl_coef /
    kl_penalty / target_kl / kl_horizon (the reward penalty)."""
    loss, coef = bool(m.roll_or(False, "use_kl_loss")), m.roll_or(0.0, "kl_loss_coef")
    loss_on = loss and coef > 0
    penalty, init = bool(m.roll_or(False, "add_token_level_kl")), m.roll_or(0.2, "init_kl_coef")
    penalty_on = penalty and init > 0
    kind = m.roll_or("kl", "kl_penalty")
    m.uses_reference = loss_on or penalty_on
    if loss == loss_on:
        _set_from(m, "use_kl_loss", False, "use_kl_loss")
    else:
        m.translate(
            ("use_kl_loss",), "use_kl_loss", loss, loss_on, "kl_loss_coef is 0: the loss term adds nothing"
        )
    if loss_on:
        _set_from(m, "kl_loss_coef", 0.0, "kl_loss_coef")
    else:
        _drop_if_present(m, "kl_loss_coef", "only read with use_kl_loss: true (and > 0)")
    if m.present("add_token_level_kl"):
        reason = (
            "roll's reward penalty is on when init_kl_coef > 0" if penalty_on else "the reward penalty is off"
        )
        m.drop(("add_token_level_kl",), reason)
    if m.present("init_kl_coef"):
        value = init if penalty_on else 0.0
        off = (
            ""
            if penalty_on or not init
            else "ROLL adds the KL penalty to rewards only with add_token_level_kl: true"
        )
        m.translate(("init_kl_coef",), "init_kl_coef", init, value, off)
    if penalty_on and loss_on and kind != "k3":
        m.unsupported(
            ("kl_penalty",),
            f"ROLL's KL loss is k3 and its reward penalty {kind}; roll uses one estimator for both",
        )
    elif penalty_on:
        _set_from(m, "kl_penalty", "kl", "kl_penalty")
    else:
        _drop_if_present(
            m,
            "kl_penalty",
            "ROLL's KL loss is always k3 (roll's default); kl_penalty only shapes its reward penalty, which is off",
        )
    target = m.roll("target_kl")
    if penalty_on and target not in (MISSING, None):
        m.translate(
            ("target_kl",),
            "target_kl",
            target,
            target,
            "roll's controller also scales kl_loss_coef" if loss_on else "",
        )
        _set_from(m, "kl_horizon", 10000, "kl_horizon")
    else:
        _drop_if_present(m, "target_kl", "ROLL's adaptive controller scales the reward penalty, which is off")
        _drop_if_present(m, "kl_horizon", "only read by the adaptive controller (target_kl)")


def clip(m: Migration) -> None:
    """pg_clip, or pg_clip_low / pg_clip_high with use_pg_clip_range."""
    use_range = bool(m.roll_or(False, "use_pg_clip_range"))
    if m.present("use_pg_clip_range"):
        m.drop(
            ("use_pg_clip_range",),
            "roll clips with pg_clip_low / pg_clip_high when they are set, else pg_clip",
        )
    if use_range:
        _set_from(m, "pg_clip_low", 0.2, "pg_clip_low")
        _set_from(m, "pg_clip_high", 0.2, "pg_clip_high")
        _drop_if_present(
            m, "pg_clip", "ROLL reads pg_clip_low / pg_clip_high instead (use_pg_clip_range: true)"
        )
    else:
        _set_from(m, "pg_clip", 0.2, "pg_clip")
        for key in ("pg_clip_low", "pg_clip_high"):
            _drop_if_present(m, key, "ROLL reads it only with use_pg_clip_range: true")


def recompute(m: Migration) -> None:
    """Old log-probs from the training model (ROLL's way), and train/infer mismatch corrections."""
    why = (
        "ROLL's old log-probs come from the training model (recomputed, or the current ones when a batch is one"
        " optimiser step); roll's default reuses the sampler's"
    )
    if m.present("enable_old_logprobs_recompute"):
        value = m.roll("enable_old_logprobs_recompute")
        m.translate(("enable_old_logprobs_recompute",), "recompute_old_log_probs", value, True, why)
    else:
        m.default("recompute_old_log_probs", True, why)
    if m.roll_or(False, "force_disable_old_logprobs_recompute"):
        m.approximate(("force_disable_old_logprobs_recompute",), "roll recomputes the old log-probs: " + why)
    else:
        _drop_if_present(m, "force_disable_old_logprobs_recompute", "false: ROLL's default")
    correction = m.roll("train_infer_correction")
    if not isinstance(correction, dict):
        _drop_if_present(m, "train_infer_correction", "empty")
        return
    m.claim_all(("train_infer_correction",))
    weight = correction.get("is_weight") or {}
    filters = [f for f in correction.get("filters") or [] if isinstance(f, dict) and f.get("enabled")]
    if weight.get("enabled") and weight.get("weight_type", "token") == "token" and weight.get("upper_bound"):
        cap = weight["upper_bound"]
        m.translate(
            ("train_infer_correction", "is_weight"),
            "tis_cap",
            weight,
            cap,
            "truncated token importance weights",
        )
    elif weight.get("enabled"):
        m.unsupported(
            ("train_infer_correction", "is_weight"),
            f"{weight.get('weight_type')}-level importance weights; roll's tis_cap weighs tokens",
        )
    if filters:
        m.unsupported(
            ("train_infer_correction", "filters"),
            "masks tokens or turns whose train/infer probability ratio is out of range; roll has no such filter"
            " (tis_cap reweights instead)",
        )
    if not weight.get("enabled") and not filters:
        m.drop(("train_infer_correction",), "no correction enabled (ROLL's default)")
