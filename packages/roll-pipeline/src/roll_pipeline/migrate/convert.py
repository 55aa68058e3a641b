"""Value converters of the `rename` rules (`Rule.convert` names one): ROLL's spelling of a value -> roll's.

Each takes the ROLL value and the migration's context (`Context`: the ROLL file, for converters that read
another key) and returns `Converted(value, why)`; `why` is empty when the value did not change form, and a
value of `MISSING` leaves roll's default in place. A `Refused(why)` is raised for a value roll cannot honour;
the rule's key is then reported unsupported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from roll_pipeline.migrate.load import MISSING, parse_device_mapping

__all__ = ["CONVERTERS", "Context", "Converted", "Refused"]


class Context(Protocol):
    """What a converter may read: ROLL's resolved value of another key (MISSING when absent)."""

    def roll(self, *keys: str) -> Any:
        """ROLL's resolved value at `keys`."""
        ...


class Converted(NamedTuple):
    """A converted value and, when its form changed, why."""

    value: Any
    why: str = ""


class Refused(ValueError):
    """A value roll cannot honour (the key is then unsupported); the message says why."""


def _same(value: Any, _: Context) -> Converted:
    return Converted(value)


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _dtype(value: Any, _: Context) -> Converted:
    if value in _DTYPES.values():
        return Converted(value)
    if value in _DTYPES:
        return Converted(_DTYPES[value], "roll spells dtypes as torch does")
    if value is None:
        return Converted("float32", "null (the model's own dtype) -> float32, roll's default")
    raise Refused(f"dtype {value!r} (expected one of {sorted(_DTYPES)})")


def _device_mapping(value: Any, _: Context) -> Converted:
    found = parse_device_mapping(value)
    if found is None:
        raise Refused(f"device_mapping {value!r} is no list of GPU indices nor list(range(a, b))")
    return Converted(found, "" if found == value else "ROLL's Python expression evaluated to a list")


def _top_k(value: Any, _: Context) -> Converted:
    if value is None or value < 0:
        return Converted(0, "-1 / null disable top-k in vLLM; roll disables it with 0")
    return Converted(value)


def _temperature(value: Any, _: Context) -> Converted:
    if value is None or value <= 0:
        raise Refused(
            f"temperature {value}: greedy training rollouts (roll samples them with temperature > 0)"
        )
    return Converted(value)


def _stop_strings(value: Any, _: Context) -> Converted:
    if value is None:
        return Converted([], "null: stop at end-of-sequence only (roll's [])")
    return Converted(list(value) if not isinstance(value, str) else [value])


def _resume(value: Any, _: Context) -> Converted:
    if value is False or value is None or value == "":
        return Converted(None, "false: start fresh (roll's null)")
    if value is True:
        return Converted("auto", "true: resume from the newest checkpoint (roll's 'auto')")
    return Converted(value)


def _track_with(value: Any, _: Context) -> Converted:
    if isinstance(value, list):
        return Converted(value)
    if value not in ("tensorboard", "wandb", "stdout"):
        raise Refused(f"tracker {value!r} (roll has tensorboard, wandb and stdout)")
    return Converted([value], "one tracker name -> a list of trackers")


def _keep_last_n(value: Any, _: Context) -> Converted:
    if not value or value <= 0:
        return Converted(None, "0 keeps every checkpoint (roll's null)")
    return Converted(value)


def _eval_steps(value: Any, ctx: Context) -> Converted:
    if value and value > 0:
        return Converted(value)
    steps = ctx.roll("max_steps")
    steps = 500 if steps is MISSING else steps
    return Converted(
        max(int(steps), 1),
        "0 turns ROLL's validation off; roll validates before and after training and every eval_steps, so"
        " this validates only at the start and the end",
    )


def _max_steps(value: Any, _: Context) -> Converted:
    if value == -1:
        raise Refused("max_steps: -1 (until the data runs out): give roll a number of steps")
    return Converted(value)


def _val_batch_size(value: Any, _: Context) -> Converted:
    if value is not None and value < 0:
        return Converted(None, "negative: every validation env once (roll's null)")
    return Converted(value)


def _envs_per_worker(value: Any, ctx: Context) -> Converted:
    if value and value > 0:
        return Converted(value)
    return Converted(MISSING, "0: all envs in one worker; roll keeps its own default (speed only)")


def _async_ratio(value: Any, _: Context) -> Converted:
    if float(value) != int(value):
        raise Refused(f"async_generation_ratio {value} (roll takes a whole number of policy versions)")
    return Converted(int(value), "" if isinstance(value, int) else "a whole number")


_SCHEDULERS = {
    "linear": "linear",
    "cosine": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
}


def _lr_scheduler(value: Any, _: Context) -> Converted:
    if value not in _SCHEDULERS:
        raise Refused(f"lr_scheduler_type {value!r} (roll has {sorted(set(_SCHEDULERS.values()))})")
    target = _SCHEDULERS[value]
    return Converted(target, "" if target == value else "roll's constant schedule warms up over warmup_steps")


def _render_save_dir(value: Any, _: Context) -> Converted:
    if not value:
        return Converted(None)
    if str(value).startswith("/"):
        return Converted(value)
    return Converted(
        "render",
        "ROLL writes relative to the working folder (under exp_name/timestamp); roll writes a relative folder"
        " inside the run folder",
    )


CONVERTERS: dict[str, Callable[[Any, Context], Converted]] = {
    "": _same,
    "dtype": _dtype,
    "device_mapping": _device_mapping,
    "top_k": _top_k,
    "temperature": _temperature,
    "stop_strings": _stop_strings,
    "resume": _resume,
    "track_with": _track_with,
    "keep_last_n": _keep_last_n,
    "eval_steps": _eval_steps,
    "max_steps": _max_steps,
    "val_batch_size": _val_batch_size,
    "envs_per_worker": _envs_per_worker,
    "async_ratio": _async_ratio,
    "lr_scheduler": _lr_scheduler,
    "render_save_dir": _render_save_dir,
}
"""Converter of each `Rule.convert` name."""
