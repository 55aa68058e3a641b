"""Each env's own state of Python's `random` and numpy's global `np.random`, swapped in around its calls.

Env libraries written outside roll (GEM, TextArena, ...) draw from the process-wide `random` module and
numpy's global generator. roll runs many env slots in one process (their calls in a thread pool), so
without this the slots of a GRPO group, given one seed, would share one stream and play different games.

An `EnvRandomState` holds one env's own `random` state and its own numpy `MT19937` bit generator. A call
made through it (`run`, or `call` for a thread pool) saves the process's `random` state, sets the env's,
installs the env's bit generator as numpy's global one (`np.random.set_bit_generator`, no copy), runs,
then keeps the env's new `random` state and restores the process's (when calls wait for each other, the
process's `random` state is put back once the last of them ends: half the copying). The global generators
are process-wide, so these calls are serialised by one process-wide lock while they run (nested calls in
the thread that holds it do not wait). `IsolatedEnv` runs an env's `reset`/`step`/`render`/`close` this way.
An env that never touches the global generators declares `owns_random_state = True` (`BaseEnv`; roll's
built-in games do); `roll_envs.hints.declares_own_random_state(env)` reads it (a subclass adding code of
its own must declare it again), and roll's env manager then calls the env
without isolation, concurrently with the others.

Seeding: `reseed(seed)` gives the state `random.seed(seed)` gives Python's `random` and the generator
`np.random.MT19937(seed)` numpy's, so the same seed gives the same state in any slot, thread or process.
roll reseeds before every `reset(seed=...)` and from `DEFAULT_SEED` before every constructor; an env
that calls `random.seed`/`np.random.seed` itself seeds its own state.

Limits: only these two global generators are isolated; an unseeded `np.random.default_rng()`, time,
`os.urandom` and state shared between instances (module-level counters) are not (`check_env` reports
envs that depend on them). Code outside env calls must not draw from the global generators in another
thread while env calls run (roll's own code uses its own generators). numpy's cached second Gaussian of
`np.random.standard_normal` is dropped at every swap: still deterministic, but not the stream the same
draws would give without swapping. `IsolatedCall.abandon` gives the lock back for a call that timed out;
its thread runs on, no longer isolated.
"""

from __future__ import annotations

import functools
import operator
import pickle
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

from roll_envs.errors import IsolatedCallAbandoned

T = TypeVar("T")

DEFAULT_SEED = 0
"""The seed of a new `EnvRandomState` (what an env constructor runs from in roll)."""

_LANE = threading.Lock()
"""Held while an isolated call runs: the global generators are process-wide."""
_GUARD = threading.Lock()
"""Guards the swaps, `abandon` and the three values below (each critical section a few microseconds)."""
_holder: int | None = None
"""Thread id holding `_LANE` (a call from that thread is nested: it swaps without waiting)."""
_waiting = 0
"""Top-level calls waiting for `_LANE`: while some are, the lock passes from call to call."""
_process_py: tuple[Any, ...] | None = None
"""The process's own `random` state, set aside while isolated calls run back to back (None: in place)."""

_NEW, _RUNNING, _DONE, _ABANDONED = "new", "running", "done", "abandoned"


class EnvRandomState:
    """One env's own state of Python's `random` and numpy's global generator.

    >>> import random
    >>> a, b = EnvRandomState(seed=7), EnvRandomState(seed=7)
    >>> a.run(random.random) == b.run(random.random)
    True
    """

    __slots__ = ("_np", "_py")

    def __init__(self, seed: int = DEFAULT_SEED) -> None:
        self._py: tuple[Any, ...] = ()
        self._np: Any = None
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Set the state `random.seed(seed)` gives `random` and `np.random.MT19937(seed)` gives numpy."""
        try:
            value = operator.index(seed)
        except TypeError:
            raise TypeError(
                f"a random state is seeded with an int; got {type(seed).__name__} {seed!r}"
            ) from None
        if value < 0:
            raise ValueError(f"a random state is seeded with an int >= 0 (numpy's rule); got {value}")
        self._py = random.Random(value).getstate()
        self._np = np.random.MT19937(value)

    def fingerprint(self) -> tuple[Any, ...]:
        """A value equal for equal states (to tell whether calls under this state drew from it)."""
        return (self._py, pickle.dumps(self._np.state) if self._np is not None else None)

    def call(self, fn: Callable[..., T], /, *args: Any) -> IsolatedCall[T]:
        """`fn(*args)` prepared to run once under this state, in any thread (see `IsolatedCall`)."""
        return IsolatedCall(self, fn, args)

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` under this state, in this thread (waits for the process-wide lock)."""
        return IsolatedCall(self, functools.partial(fn, **kwargs) if kwargs else fn, args)()


class IsolatedCall(Generic[T]):
    """One call under an env's random state (made by `EnvRandomState.call`): run it once with `()`.

    `started_at` is the `time.monotonic()` at which it got the process-wide lock (None before): a caller
    timing the call counts from there, not from the wait behind other envs' calls.
    """

    __slots__ = ("_args", "_fn", "_nested", "_outer_np", "_outer_py", "_state", "_status", "started_at")

    def __init__(self, state: EnvRandomState, fn: Callable[..., T], args: tuple[Any, ...]) -> None:
        self._state, self._fn, self._args = state, fn, args
        self.started_at: float | None = None
        self._status = _NEW
        self._nested = False
        self._outer_py: tuple[Any, ...] = ()
        self._outer_np: Any = None

    def __call__(self) -> T:
        """Wait for the process-wide lock, swap the env's state in, run, swap it out."""
        global _holder, _waiting, _process_py
        me = threading.get_ident()
        nested = _holder == me  # only this thread sets _holder to its own id
        if not nested:
            with _GUARD:
                _waiting += 1
            _LANE.acquire()
        with _GUARD:
            if not nested:
                _waiting -= 1
            if self._status != _NEW:
                if not nested:
                    _release_lane()
                raise IsolatedCallAbandoned(
                    f"this isolated call is {self._status}: it was abandoned before it started, or is run "
                    "twice; make a new call with EnvRandomState.call"
                )
            if nested:  # the enclosing call's state, put back when this one ends
                self._outer_py = random.getstate()
            else:
                _holder = me
                if _process_py is None:  # the lock was idle: the process's own state is in place
                    _process_py = random.getstate()
            self._nested = nested
            self._outer_np = np.random.get_bit_generator()
            random.setstate(self._state._py)
            np.random.set_bit_generator(self._state._np)
            self._status = _RUNNING
            self.started_at = time.monotonic()
        try:
            return self._fn(*self._args)
        finally:
            with _GUARD:
                if self._status == _RUNNING:  # not abandoned meanwhile: keep the env's new state
                    self._state._py = random.getstate()
                    self._state._np = np.random.get_bit_generator()  # the env may have installed its own
                    self._swap_out()
                    self._status = _DONE

    def abandon(self) -> None:
        """Give up on this call, from any thread: if it holds the process-wide lock, restore the process's
        state and release the lock (its thread runs on unisolated and changes nothing when it returns);
        if it has not started, it never runs its function."""
        with _GUARD:
            if self._status == _RUNNING and not self._nested:
                self._swap_out()
            if self._status != _DONE:
                self._status = _ABANDONED

    def _swap_out(self) -> None:
        """Put back the state found when the call started and release the lock (under `_GUARD`)."""
        np.random.set_bit_generator(self._outer_np)
        self._outer_np = None
        if self._nested:
            random.setstate(self._outer_py)
            self._outer_py = ()
        else:
            _release_lane()


def _release_lane() -> None:
    """Release `_LANE` (under `_GUARD`). The process's `random` state goes back in place unless another
    call waits for the lock: that one sets its own state anyway, so the lock passes on with two copies of
    the `random` state (the costly part, ~625 ints each) instead of four."""
    global _holder, _process_py
    _holder = None
    if _waiting == 0 and _process_py is not None:
        random.setstate(_process_py)
        _process_py = None
    _LANE.release()


class IsolatedEnv:
    """An env whose `reset`, `step`, `render` and `close` run under its own `EnvRandomState`, as roll
    runs each env slot; `reset(seed=s)` reseeds the state from `s` first, so the same seed gives the
    same episode in any instance, thread or process even when the env draws from `random` or `np.random`.

    `env` is the wrapped env (calls made on it directly are not isolated). `drew_from_globals` turns True
    once a call made through the wrapper drew from (or reseeded) `random` or `np.random`, which an env
    declaring `owns_random_state` must never do (`check_env` reads it).

    >>> import roll_envs
    >>> env = IsolatedEnv.make(roll_envs.make, "frozen_lake")
    >>> obs, info = env.reset(seed=0)
    """

    def __init__(self, env: Any, random_state: EnvRandomState | None = None) -> None:
        self.env = env
        self.random_state = random_state if random_state is not None else EnvRandomState()
        self.drew_from_globals = False

    @classmethod
    def make(cls, factory: Callable[..., Any], /, *args: Any, **kwargs: Any) -> IsolatedEnv:
        """`factory(*args, **kwargs)` run under a new state (seeded `DEFAULT_SEED`), wrapped."""
        state = EnvRandomState()
        return cls(state.run(factory, *args, **kwargs), state)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """`env.reset(seed=seed)` (and `options=options` when given), the state reseeded from `seed` first
        (if given); as roll's env manager calls it."""
        if seed is not None:
            self.random_state.reseed(seed)
        if options is None:
            return self._run(self.env.reset, seed=seed)
        return self._run(self.env.reset, seed=seed, options=options)

    def step(self, action: Any) -> Any:
        """`env.step(action)` under the env's state."""
        return self._run(self.env.step, action)

    def render(self, *args: Any) -> Any:
        """`env.render(*args)` under the env's state."""
        return self._run(self.env.render, *args)

    def close(self) -> None:
        """`env.close()` under the env's state."""
        self._run(self.env.close)

    def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` under the env's state, noting whether the call changed that state."""
        before = self.random_state.fingerprint()
        try:
            return self.random_state.run(fn, *args, **kwargs)
        finally:
            self.drew_from_globals = self.drew_from_globals or self.random_state.fingerprint() != before

    @property
    def valid_actions(self) -> Any:
        """`env.valid_actions`, read under the env's state."""
        return self._run(getattr, self.env, "valid_actions")

    @property
    def players(self) -> tuple[str, ...]:
        """`env.players` (() for one agent or an env without the hook)."""
        return tuple(getattr(self.env, "players", ()) or ())

    @property
    def current_player(self) -> str:
        """`env.current_player` ("" without the hook)."""
        return str(getattr(self.env, "current_player", ""))

    @property
    def fixed_policies(self) -> tuple[str, ...]:
        """`env.fixed_policies` (() without the hook)."""
        return tuple(getattr(self.env, "fixed_policies", ()) or ())

    def fixed_policy_answer(self, name: str) -> str:
        """`env.fixed_policy_answer(name)` under the env's state."""
        return self._run(self.env.fixed_policy_answer, name)

    def demonstration(self) -> str | None:
        """`env.demonstration()` under the env's state (None for an env without the hook)."""
        hook = getattr(self.env, "demonstration", None)
        return None if hook is None else self._run(hook)

    def format_answer(self, *actions: str) -> str:
        """`env.format_answer(*actions)`."""
        return self.env.format_answer(*actions)

    @property
    def metadata(self) -> Any:
        """`env.metadata`."""
        return self.env.metadata

    @property
    def config(self) -> Any:
        """`env.config` (None when the env has none)."""
        return getattr(self.env, "config", None)
