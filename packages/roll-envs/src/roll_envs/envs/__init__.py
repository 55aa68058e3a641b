"""The built-in games of roll-envs, each written on the SDK (`roll_envs.base`, `roll_envs.config`, ...) and
registered by id in `builtins.py`. `import roll_envs` registers them; their public names are importable from
`roll_envs` too.

Modules:
    builtins.py      every built-in id (with its Gymnasium name and defaults) and the adapter prefixes,
                     registered with roll_envs and Gymnasium by `register_builtins`
    four_choice.py   `four_choice`: a one-turn contextual bandit (the right letter for a colour)
    tictactoe.py     `tictactoe`: two seats, fixed players `random` and `minimax`
    frozen_lake/     `frozen_lake`: rules.py, env.py, baselines.py
    sokoban/         `sokoban` and its variants: rules.py, generator.py, env.py, baselines.py
    webshop/         `webshop_lite`: vocabulary.py, catalog.py (+ catalog.json), reward.py, env.py
    sandbox/         `sandbox`: tasks.py, runner.py, launcher.py, workdir.py, env.py
"""
