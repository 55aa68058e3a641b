"""Sandbox: multi-turn tasks solved with the tool calls `run_python(code)`, `run_shell(command)` and a final
`submit(answer)`, each call in a fresh, limited and isolated subprocess (a machine without namespaces is
refused unless the config opts out with `isolation="none"`).

Modules:
    tasks.py      the task families (table, text, array, edit), their splits and the answer checks
    runner.py     one call: `unshare` and the launcher, the limits, bounded and watched reading, the kill
    launcher.py   the program each call starts with: mounts, chroot, privileges, rlimits, exec (a script)
    workdir.py    the episode's directory and its size, and a call's output as text (escaped, cut)
    env.py        `SandboxConfig`, `SandboxEnv`
"""

from roll_envs.envs.sandbox.env import TOOLS, SandboxConfig, SandboxEnv
from roll_envs.envs.sandbox.runner import CallResult, Limits, isolation_available, run_call
from roll_envs.envs.sandbox.tasks import FAMILIES, SPLITS, Task, check_answer, make_task

__all__ = [
    "FAMILIES",
    "SPLITS",
    "TOOLS",
    "CallResult",
    "Limits",
    "SandboxConfig",
    "SandboxEnv",
    "Task",
    "check_answer",
    "isolation_available",
    "make_task",
    "run_call",
]
