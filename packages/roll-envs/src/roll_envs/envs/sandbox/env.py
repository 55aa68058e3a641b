"""`SandboxEnv`: multi-turn tasks solved by running code, with the tool calls `run_python(code)`,
`run_shell(command)` and a final `submit(answer)`.

Each call runs in a fresh subprocess (`runner.run_call`) in the episode's own directory, isolated in
namespaces of its own (no network, its own PIDs, a read-only root holding the system's programs and the
episode's directory), under limits on CPU time, wall time, memory (per process and of the whole call),
processes, file size, output and the episode directory's size. Where namespaces are unavailable the config
is refused unless it opts out (`isolation="none"`, for trusted code only). The observation is the call's
stdout and stderr, cut to `observation_chars`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from roll_envs.base import BASE_METRICS, ActionOutcome, Aggregation, BaseEnv
from roll_envs.config import EnvConfig, turns_field
from roll_envs.envs.sandbox import runner
from roll_envs.envs.sandbox.runner import PYTHON, CallResult, Limits, run_call
from roll_envs.envs.sandbox.tasks import FAMILIES, Split, Task, check_answer, make_task
from roll_envs.envs.sandbox.workdir import Workdir, cut, episode_uid, show_bytes, signal_name, tree_bytes
from roll_envs.parsing import AnswerFormat
from roll_envs.tool_calls import ToolCall

TOOLS: Mapping[str, str] = {"run_python": "code", "run_shell": "command", "submit": "answer"}
"""Each tool and the name of its one string argument."""

EMPTY_SUBMIT = ToolCall("submit", {"answer": ""}).action
NO_CALL = "No tool call was read. Answer with one JSON tool call: run_python, run_shell or submit."
SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
_log = logging.getLogger(__name__)


@functools.cache
def warn_unisolated() -> None:
    """Log, once per process, that this worker runs sandbox calls without isolation."""
    _log.warning(
        "env 'sandbox' runs with isolation='none': its calls run as this worker's user, with its network"
        " and files, and only per-process limits (docs/envs/sandbox.md). Use it for trusted code only."
    )


class SandboxConfig(EnvConfig):
    """Config of `SandboxEnv` (plus `max_steps`, `format_penalty`, `max_actions_per_turn`)."""

    max_steps: int = turns_field(10, le=100)
    answer_format: AnswerFormat = Field(
        AnswerFormat.TOOL_CALL,
        description="how a call is read from a turn; 'tool_call' (JSON) is the natural one",
    )
    split: Split = Field(
        "train", description="'train' or 'held_out': which variants of each family are asked"
    )
    families: tuple[str, ...] = Field(
        tuple(FAMILIES), description=f"task families drawn from: {list(FAMILIES)}"
    )
    isolation: Literal["namespaces", "none"] = Field(
        "namespaces",
        validate_default=True,
        description="'namespaces': no network, own PIDs, a read-only root (refused where the kernel forbids"
        " it); 'none': resource limits only, UNSAFE for untrusted code (the calls run as the worker's user)",
    )
    cpu_seconds: int = Field(5, ge=1, le=600, description="CPU time of a call (SIGXCPU past it)")
    wall_seconds: float = Field(
        10.0, gt=0, le=600, description="wall time of a call; past it the call is killed"
    )
    memory_mb: int = Field(
        1024, ge=64, le=1 << 20, description="address space of each process of a call, MiB (RLIMIT_AS)"
    )
    call_memory_mb: int = Field(
        1024,
        ge=16,
        le=1 << 20,
        description="resident memory of all the processes of a call together, MiB, measured every 0.1 s;"
        " past it the call is killed (isolated calls only)",
    )
    processes: int = Field(64, ge=4, le=4096, description="processes a call may run at once (RLIMIT_NPROC)")
    file_mb: int = Field(16, ge=1, le=1 << 16, description="largest file a call may write, MiB")
    disk_mb: int = Field(
        64,
        ge=1,
        le=1 << 20,
        description="size of the episode's directory, MiB (blocks, at least 4 KiB an entry), measured every"
        " 0.1 s during a call and after it; past it the call is killed and the episode ends",
    )
    output_bytes: int = Field(
        1 << 16, ge=1024, le=1 << 26, description="stdout+stderr read; past it the call is killed"
    )
    observation_chars: int = Field(
        2000, ge=200, le=20_000, description="observation budget; the rest is cut, saying so"
    )

    @field_validator("families")
    @classmethod
    def _known_families(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [f for f in value if f not in FAMILIES]
        if unknown or not value:
            raise ValueError(f"unknown or no families {unknown}; choose from {list(FAMILIES)}")
        return value

    @field_validator("isolation")
    @classmethod
    def _isolation_works(cls, value: str) -> str:
        works, why = runner.isolation_available() if value == "namespaces" else (True, "")
        if not works:
            raise ValueError(
                f"the sandbox isolates its calls in namespaces, which are not available here: {why}. Fix: allow"
                " unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or"
                " kernel.apparmor_restrict_unprivileged_userns=0; in Docker a seccomp profile that allows"
                " unshare), or, for trusted code only, set isolation='none' (docs/envs/sandbox.md)"
            )
        return value

    @model_validator(mode="after")
    def _call_memory_needs_isolation(self) -> SandboxConfig:
        if self.isolation == "none" and "call_memory_mb" in self.model_fields_set:
            raise ValueError(
                f"call_memory_mb={self.call_memory_mb} is watched only for isolated calls (an unisolated call's"
                " processes cannot be told from the worker's); with isolation='none' only memory_mb, per"
                " process, holds. Fix: drop call_memory_mb, or use isolation='namespaces'"
            )
        return self

    def limits(self) -> Limits:
        """The limits of one call."""
        return Limits(
            cpu_seconds=self.cpu_seconds,
            wall_seconds=self.wall_seconds,
            memory_bytes=self.memory_mb << 20,
            call_memory_bytes=self.call_memory_mb << 20,
            processes=self.processes,
            file_bytes=self.file_mb << 20,
            disk_bytes=self.disk_mb << 20,
            output_bytes=self.output_bytes,
        )


class SandboxEnv(BaseEnv):
    """Solve a generated task by running Python and shell commands in a sandbox, then submit the answer."""

    config_cls = SandboxConfig
    owns_random_state = True  # draws only from the episode rng; its calls wait on subprocesses
    config: SandboxConfig
    metric_aggregation: ClassVar[Mapping[str, Aggregation]] = {
        **BASE_METRICS,
        "tool_calls": "sum",
        "calls_stopped": "sum",
        "submitted": "last",
    }

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        self.isolated = self.config.isolation == "namespaces"
        if not self.isolated:
            warn_unisolated()
        self.metadata = {**type(self).metadata, "sandbox_isolation": self.config.isolation}
        self.workdir: Workdir | None = None
        self.task: Task | None = None
        self.output = ""
        self.submitted = self.solved = False
        self.calls = self.stopped = 0

    @property
    def instruction(self) -> str:
        """The system prompt: the tools, the limits and the answer format."""
        shell = ToolCall("run_shell", {"command": "ls -l"}).action
        python = ToolCall("run_python", {"code": "print(2 + 2)"}).action
        submit = ToolCall("submit", {"answer": "42"}).action
        cfg = self.config
        net = "no network, " if self.isolated else ""
        return (
            "You solve a task in a sandbox: a directory holding the task's files. Each turn, call one tool: "
            "run_python(code) runs Python 3 code, run_shell(command) runs a bash command, each in a fresh "
            f"process in that directory (its files persist between calls; {net}{cfg.cpu_seconds} s of CPU, "
            f"{cfg.wall_seconds:g} s of wall time, {cfg.memory_mb} MiB of memory, {cfg.disk_mb} MiB of files; "
            f"output past {cfg.observation_chars} characters is cut). submit(answer) ends the episode and the "
            f"answer is checked. Examples: {self.format_answer(shell)}, {self.format_answer(python)}, "
            f"{self.format_answer(submit)}."
        )

    @property
    def valid_actions(self) -> list[str]:
        """One call: `submit` with an empty answer. The answer space is open (any code, any answer), but
        callers that play from a list of actions (`check_env`'s random play, warm-up) get one that is safe
        and runs no subprocess; `match_action` accepts every well-formed call."""
        return [EMPTY_SUBMIT]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """A new directory holding the files of a task drawn from `rng` (or `options["task"]`)."""
        task = options.get("task")
        self.task = (
            task if isinstance(task, Task) else make_task(rng, self.config.split, self.config.families)
        )
        if self.workdir is not None:
            self.workdir.close()
        self.workdir = Workdir(episode_uid() if self.isolated else None)
        self.workdir.write(self.task.files)
        self.output = f"Task: {self.task.prompt}\nFiles: {', '.join(sorted(self.task.files))}"
        self.submitted = self.solved = False
        self.calls = self.stopped = 0

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Read the turn's tool call and run it (see `BaseEnv.step`)."""
        self.output = NO_CALL  # kept when the turn holds no call; a read or refused call replaces it
        return super().step(action)

    def match_action(self, token: str) -> str | None:
        """A call of a known tool with its one string argument, as the call's canonical JSON; else None (an
        invalid turn), saying what was wrong in the next observation."""
        call = ToolCall.from_action(token)
        if call is None or call.name not in TOOLS:
            name = call.name if call else token
            self.output = f"Unknown tool {name[:60]!r}; the tools are run_python(code), run_shell(command), submit(answer)."
            return None
        arg = TOOLS[call.name]
        if set(call.arguments) != {arg} or not isinstance(call.arguments[arg], str):
            self.output = f"{call.name} takes one string argument {arg!r}; got {sorted(call.arguments)}."
            return None
        return call.action

    def apply_action(self, action: str) -> ActionOutcome:
        """Run the call, or check the submitted answer (ending the episode)."""
        call = ToolCall.from_action(action)
        assert call is not None and self.task is not None and self.workdir is not None
        value = str(call.arguments[TOOLS[call.name]])
        if call.name == "submit":
            self.solved = check_answer(self.task, value, self.workdir.work)
            self.submitted = True
            self.output = f"Submitted {cut(value, 200)!r}: {'correct' if self.solved else 'wrong'}."
            return ActionOutcome(float(self.solved), True, True)
        argv = [PYTHON, "-c", value] if call.name == "run_python" else [SHELL, "-c", value]
        limits = self.config.limits()
        result = run_call(argv, self.workdir.path, limits, self.isolated, self.workdir.run_as)
        self.calls += 1
        self.output = self.describe(call.name, result)
        budget = self.config.disk_mb << 20
        over = tree_bytes(self.workdir.work, budget) > budget  # what it wrote in its last 0.1 s counts too
        self.stopped += bool(result.stopped or signal_name(result.exit_code) or over)
        if not over:
            return ActionOutcome(0.0, False, True)
        self.output += (
            f"\nThe episode's directory holds over {self.config.disk_mb} MiB (disk_mb), its limit: the episode"
            " ends."
        )
        return ActionOutcome(0.0, True, True)

    def describe(self, tool: str, result: CallResult) -> str:
        """The observation of a call: how it ended, then its stdout and stderr within the budget."""
        limits = self.config.limits()
        if result.stopped == "wall time":
            ending = f"stopped: wall time limit ({limits.wall_seconds:g} s); the call was killed"
        elif result.stopped == "output limit":
            ending = f"stopped: output limit ({limits.output_bytes} bytes); the call was killed"
        elif result.stopped == "memory limit":
            ending = (
                f"stopped: memory limit ({self.config.call_memory_mb} MiB for all the call's processes"
                " together); the call was killed"
            )
        elif result.stopped == "disk limit":
            ending = (
                f"stopped: disk limit ({self.config.disk_mb} MiB for the episode's directory); the call"
                " was killed"
            )
        elif why := signal_name(result.exit_code):
            ending = f"stopped: {why}, exit code {result.exit_code}"
        else:
            ending = f"exit code {result.exit_code}"
        out, err = show_bytes(result.stdout), show_bytes(result.stderr)
        budget = self.config.observation_chars
        err_budget = min(len(err), budget // 3 if out else budget)
        parts = [f"[{tool}] {ending}"]
        if out:
            parts.append(f"stdout:\n{cut(out, budget - err_budget)}")
        if err:
            parts.append(f"stderr:\n{cut(err, err_budget)}")
        if not out and not err:
            parts.append("(no output)")
        return "\n".join(parts)

    def text_observation(self) -> str:
        """The task (after reset), or what the last turn's call printed."""
        return self.output

    def is_success(self) -> bool:
        """Submitted a correct answer."""
        return self.solved

    def episode_metrics(self) -> dict[str, float]:
        """`tool_calls` and `calls_stopped` (by a limit) so far, and `submitted`."""
        return {
            "tool_calls": float(self.calls),
            "calls_stopped": float(self.stopped),
            "submitted": float(self.submitted),
        }

    def close(self) -> None:
        """Remove the episode's directory."""
        if self.workdir is not None:
            self.workdir.close()
        super().close()
