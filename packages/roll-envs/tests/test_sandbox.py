"""The `sandbox` env: registration, `check_env`, a scripted solver per family, `roll-envs play`, the
refusal to run unisolated unless opted out, and the hazards: each ends its call with a clear observation and
leaves the worker and the other episodes running. The escapes (`needs_isolation`) fail without isolation.

Every call is a subprocess, so the tests keep their calls few and their limits low (1 s of CPU, 4 s of
wall time, 16 processes)."""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import roll_envs
from roll_envs.envs.sandbox import FAMILIES, SandboxEnv, isolation_available
from roll_envs.envs.sandbox.env import warn_unisolated
from roll_envs.envs.sandbox.runner import Limits, run_call
from roll_envs.envs.sandbox.workdir import Workdir, tree_bytes

ISOLATED, WHY_NOT = isolation_available()
MODE = {"isolation": "namespaces" if ISOLATED else "none"}
"""What a machine without namespaces must opt into (the default refuses it)."""
LIMITS = {"cpu_seconds": 1, "wall_seconds": 4.0, "processes": 16, "memory_mb": 256, "file_mb": 1, **MODE}
needs_isolation = pytest.mark.skipif(
    not ISOLATED, reason=f"namespaces unavailable here ({WHY_NOT}); without them the call is not contained"
)


def call(name: str, **arguments: str) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def shell(command: str) -> str:
    return call("run_shell", command=command)


def python(code: str) -> str:
    return call("run_python", code=code)


@pytest.fixture
def env():
    env = roll_envs.make("sandbox", **LIMITS)
    env.reset(seed=0)
    yield env
    env.close()


def assert_contained(env) -> None:
    """Before a hazard that would reach the whole machine unisolated (kill -1, a fork bomb as root): the call
    runs in a pid namespace of its own, or the test stops here, having sent nothing."""
    mine = os.readlink("/proc/self/ns/pid")
    obs = env.step(shell("readlink /proc/self/ns/pid"))[0]
    assert "pid:[" in obs and mine not in obs, f"the call shares the worker's pid namespace ({mine}): {obs}"


@pytest.fixture
def bystander():
    """Another episode, checked after each hazard: it still runs calls."""
    other = roll_envs.make("sandbox", **LIMITS)
    other.reset(seed=1)
    yield other
    obs = other.step(shell("echo still here"))[0]
    assert "still here" in obs, obs
    other.close()


def test_registered_declared_and_passes_check_env():
    env = roll_envs.make("sandbox", **MODE)
    assert isinstance(env, SandboxEnv) and SandboxEnv.owns_random_state
    assert env.metadata["sandbox_isolation"] == MODE["isolation"]
    assert roll_envs.check_env(env, make_env=lambda: roll_envs.make("sandbox", **MODE)) == []
    env.close()


SOLVERS = {
    "table": (
        "revenue_of_region",
        "import csv\nrows = list(csv.DictReader(open('sales.csv')))\n"
        "print(f\"{sum(int(r['units']) * float(r['price']) for r in rows if r['region'] == '{region}'):.2f}\")",
    ),
    "text": ("reverse_words", "print(' '.join(open('text.txt').read().split()[::-1]))"),
    "array": (
        "max_subarray",
        "import json\nbest, run = None, 0\nfor v in json.load(open('numbers.json')):\n"
        "    run = max(v, run + v)\n    best = run if best is None else max(best, run)\nprint(best)",
    ),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_scripted_solver_solves_each_family_and_a_wrong_answer_scores_zero(family):
    env = roll_envs.make("sandbox", families=[family], **MODE)
    rng = np.random.default_rng(5)
    if family == "edit":
        task = FAMILIES[family](rng, "set_value")
        key, value = task.prompt.split("Set the value of ")[1].split(".")[0].split(" to ")
        turns = [shell(f"sed -i 's/^{key} = .*/{key} = {value}/' settings.ini")]
    else:
        variant, code = SOLVERS[family]
        task = FAMILIES[family](rng, variant)
        if family == "table":
            code = code.replace("{region}", task.prompt.split("of region ")[1].split("?")[0])
        turns = [python(code)]
    env.reset(seed=0, options={"task": task})
    _, reward, *_ = env.step(call("submit", answer="surely wrong"))
    assert reward == 0.0
    env.reset(seed=0, options={"task": task})
    for turn in turns:
        obs, reward, terminated, _, info = env.step(turn)
        assert info["action_is_valid"] and "exit code 0" in obs, obs
    answer = "done" if family == "edit" else obs.split("stdout:\n")[1].strip()
    obs, reward, terminated, _, info = env.step(call("submit", answer=answer))
    assert (reward, terminated, info["success"]) == (1.0, True, True), obs
    env.close()


def test_roll_envs_play_sandbox():
    turns = [shell("cat text.txt | wc -c"), "not a call", call("submit", answer="7")]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "roll_envs.cli",
            "play",
            "sandbox",
            "--seed",
            "1",
            "--set",
            'families=["text"]',
            "--set",
            f"isolation={MODE['isolation']}",
        ],
        input="\n".join(turns) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[run_shell] exit code 0" in proc.stdout
    assert "Unknown tool 'not a call'" in proc.stdout and "--- episode over ---" in proc.stdout


def test_a_bad_call_is_an_invalid_turn_that_says_what_was_wrong(env):
    obs, *_, info = env.step(call("rm_rf", path="/"))
    assert not info["action_is_valid"] and "Unknown tool 'rm_rf'" in obs
    obs, *_, info = env.step(call("run_shell", cmd="ls"))
    assert not info["action_is_valid"] and "run_shell takes one string argument 'command'" in obs


def test_each_call_gets_a_clean_environment_and_the_episode_directory_as_home(env, monkeypatch):
    monkeypatch.setenv("ROLL_SECRET_TOKEN", "hunter2")
    obs = env.step(shell("env; pwd; echo home=$HOME; touch made_here"))[0]
    assert "hunter2" not in obs and "ROLL_SECRET_TOKEN" not in obs
    assert "home=/work" in obs if ISOLATED else f"home={env.workdir.work}" in obs
    assert (env.workdir.work / "made_here").is_file()


@needs_isolation
def test_a_fork_bomb_is_contained(env, bystander):
    assert_contained(env)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    start = time.monotonic()
    obs = env.step(python(bomb))[0]
    assert "stopped: " in obs, obs
    assert time.monotonic() - start < 15
    assert "exit code 0" in env.step(shell("echo after"))[0]


def test_an_infinite_loop_is_stopped(env, bystander):
    obs = env.step(python("while True:\n    pass"))[0]
    assert "stopped: CPU time limit" in obs or "stopped: wall time limit" in obs, obs
    assert env.step(python("print(1)"))[4]["metrics"]["calls_stopped"] == 1.0


def test_a_10_gb_allocation_fails_inside_the_call(env, bystander):
    obs = env.step(python("x = bytearray(10 * 2**30)"))[0]
    assert "exit code 1" in obs and "MemoryError" in obs, obs


@needs_isolation
def test_writing_and_reading_outside_the_episode_directory_fail(env, bystander, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    target = tmp_path / "written.txt"
    obs = env.step(
        shell(f"cat {secret} /etc/shadow; echo x > {target}; echo y > /usr/evil; ls /; echo done")
    )[0]
    assert "the secret" not in obs and "root:" not in obs and "No such file or directory" in obs, obs
    assert "Read-only file system" in obs and "done" in obs
    assert not target.exists() and not os.path.exists("/usr/evil")
    obs = env.step(python("import os; os.symlink('/etc/hostname', 'link'); print(open('link').read())"))[0]
    assert "No such file or directory" in obs  # /etc holds only a few files, and not this one


@needs_isolation
def test_signalling_the_parent_or_everyone_reaches_nobody_outside(env, bystander):
    assert_contained(env)
    worker = os.getpid()
    obs = env.step(shell(f"kill -TERM $PPID; kill -KILL {worker}; kill -KILL -1; echo sent"))[0]
    assert "sent" in obs or "stopped" in obs, obs
    assert os.getpid() == worker  # this process, the worker, is alive to assert it


@needs_isolation
def test_a_listener_on_the_workers_loopback_is_out_of_reach(env):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        obs = env.step(
            python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 2)\nprint('reached')")
        )[0]
        server.setblocking(False)
        with pytest.raises(BlockingIOError):  # no connection is waiting
            server.accept()
    assert "exit code 1" in obs and "OSError" in obs and "reached" not in obs, obs


@needs_isolation
def test_a_daemon_dies_with_the_call_that_started_it(env):
    """A `setsid` child and a double-forked one both try to write 0.5 s after their call returned."""
    late = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    late += "        time.sleep(0.5)\n        open('late_python', 'w').write('x')"
    assert "exit code 0" in env.step(python(late))[0]
    obs = env.step(
        shell("setsid sh -c 'sleep 0.5; echo x > late_shell' </dev/null >/dev/null 2>&1 & sleep 0.1; echo ok")
    )[0]
    assert "ok" in obs, obs
    time.sleep(1.5)
    assert sorted(p.name for p in env.workdir.work.glob("late_*")) == []


@needs_isolation
def test_memory_spread_over_processes_is_bounded_for_the_whole_call(bystander):
    """Four processes of 40 MiB each (each under memory_mb) pass the call's 64 MiB together."""
    env = roll_envs.make("sandbox", **{**LIMITS, "call_memory_mb": 64})
    env.reset(seed=0)
    code = "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        x = b'x' * (40 << 20)\n"
    code += "        time.sleep(3)\n        os._exit(0)\nfor _ in range(4):\n    os.wait()\nprint('all held')"
    obs = env.step(python(code))[0]
    assert "stopped: memory limit (64 MiB" in obs and "all held" not in obs, obs
    env.close()


def test_binary_garbage_is_escaped_and_cut(env, bystander):
    obs = env.step(shell("head -c 300000 /dev/urandom"))[0]
    assert "stopped: output limit" in obs, obs[:300]
    assert " chars cut]" in obs and len(obs) < 2200
    assert all(c.isprintable() or c in "\n\t" for c in obs)


def test_calls_of_two_episodes_run_side_by_side(tmp_path):
    """A call that waits does not hold up another episode's call (the env is I/O bound)."""
    slow, fast = Workdir(), Workdir()
    done: dict[str, float] = {}
    limits = Limits(wall_seconds=10)

    def run(name: str, workdir: Workdir, command: str) -> None:
        run_call(["/bin/sh", "-c", command], workdir.path, limits, ISOLATED, None)
        done[name] = time.monotonic()

    threads = [
        threading.Thread(target=run, args=("slow", slow, "sleep 1.5")),
        threading.Thread(target=run, args=("fast", fast, "true")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert done["fast"] < done["slow"]
    for workdir in (slow, fast):
        workdir.close()
        assert not workdir.path.exists()


def test_filling_the_disk_past_its_budget_stops_the_call_and_ends_the_episode(bystander):
    """Files of 0.5 MiB (under file_mb) past disk_mb=4: written slowly, the call is stopped on the way;
    written at once, the call may end first, and the check after it ends the episode."""
    env = roll_envs.make("sandbox", **{**LIMITS, "disk_mb": 4})
    for pause in (0.05, 0):
        env.reset(seed=0)
        code = "import time\nfor i in range(40):\n    open(f'f{i}', 'wb').write(bytes(1 << 19))\n"
        obs, reward, terminated, *_ = env.step(python(code + f"    time.sleep({pause})"))
        assert terminated and reward == 0.0 and "over 4 MiB (disk_mb), its limit: the episode ends" in obs
        assert "stopped: disk limit (4 MiB" in obs or not pause, obs
        assert tree_bytes(env.workdir.work, 1 << 30) < (6 if pause else 21) << 20
    env.close()


@pytest.fixture
def no_namespaces(monkeypatch, tmp_path):
    """The kernel refusing namespaces as Docker's seccomp profile does: `unshare` fails (the probe reruns)."""
    fake = tmp_path / "unshare"
    fake.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    isolation_available.cache_clear()
    yield
    monkeypatch.undo()
    isolation_available.cache_clear()


def test_without_namespaces_the_default_is_refused_and_none_is_an_opt_in_logged_once(no_namespaces, caplog):
    with pytest.raises(roll_envs.EnvConfigError) as refused:
        roll_envs.make("sandbox")
    assert "field 'isolation'" in str(refused.value) and "Operation not permitted" in str(refused.value)
    assert "set isolation='none'" in str(refused.value)
    warn_unisolated.cache_clear()
    with caplog.at_level(logging.WARNING, logger="roll_envs.envs.sandbox.env"):
        envs = [roll_envs.make("sandbox", isolation="none") for _ in range(2)]
    assert [r.getMessage()[:47] for r in caplog.records] == [
        "env 'sandbox' runs with isolation='none': its c"
    ]
    assert envs[0].metadata["sandbox_isolation"] == "none"


def test_without_isolation_the_limits_still_hold():
    with pytest.raises(
        roll_envs.EnvConfigError, match="call_memory_mb=64 is watched only for isolated calls"
    ):
        roll_envs.make("sandbox", isolation="none", call_memory_mb=64)
    env = roll_envs.make("sandbox", **{**LIMITS, "isolation": "none"})
    env.reset(seed=2)
    assert env.metadata["sandbox_isolation"] == "none"
    assert "MemoryError" in env.step(python("x = bytearray(10 * 2**30)"))[0]
    obs = env.step(python("while True:\n    pass"))[0]
    assert "stopped: CPU time limit" in obs or "stopped: wall time limit" in obs, obs
    obs = env.step(shell("head -c 300000 /dev/urandom"))[0]
    assert "stopped: output limit" in obs and " chars cut]" in obs
    env.close()


def test_a_copied_env_copies_its_files():
    env = roll_envs.make("sandbox", families=["edit"], **MODE)
    env.reset(seed=0)
    assert roll_envs.check_env(env) == []  # interleaves deep copies of `env`
    twin = copy.deepcopy(env)
    assert twin.workdir.path != env.workdir.path
    assert (twin.workdir.work / "settings.ini").read_text() == (env.workdir.work / "settings.ini").read_text()
    twin.close()
    env.close()
