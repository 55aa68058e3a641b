"""Importing the config needs no POSIX-only module, so `roll config` and `AgenticConfig` work on Windows too.

A subprocess blocks the POSIX-only standard modules: those no library needs on Linux either (`fcntl`, `pwd`,
`grp`, `termios`) for everyone, through `sys.modules` entries set to None; all of them (`resource` too, which
psutil's Linux backend imports and its Windows one does not) for roll's own modules, through an import hook.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import builtins, sys
    POSIX_ONLY = {"fcntl", "resource", "pwd", "grp", "termios", "tty", "pty", "syslog", "crypt", "spwd", "nis",
                  "posix", "_posixsubprocess", "_posixshmem", "readline", "curses"}
    for name in ("fcntl", "pwd", "grp", "termios"):
        sys.modules[name] = None
    real_import = builtins.__import__
    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        importer = (globals or {}).get("__name__", "")
        if importer.startswith("roll_") and name.split(".")[0] in POSIX_ONLY:
            raise ImportError(f"{importer} imports the POSIX-only module {name}")
        return real_import(name, globals, locals, fromlist, level)
    builtins.__import__ = guarded_import

    import roll_pipeline.config.compose, roll_pipeline.preflight, roll_pipeline.config.schema
    from roll_pipeline.config.schema import AgenticConfig
    AgenticConfig(pretrain="builtin:tiny-frozen-lake")
    print("ok")
    """
)


def test_the_config_imports_without_posix_only_modules():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_the_guard_catches_a_roll_module_importing_one():
    guard = SCRIPT.split("import roll_pipeline.config.compose")[0]
    code = guard + 'exec("import resource", {"__name__": "roll_example"})\n'
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "roll_example imports the POSIX-only module resource" in proc.stderr
