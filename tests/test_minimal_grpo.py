"""examples/minimal_grpo.py, the one-file GRPO reference: it imports only roll_envs and roll_algos of roll, its
command line maps onto its `Args`, and with its default arguments it teaches the builtin tiny model four_choice:
greedy success on the held-out seeds from the untrained model's (the best fixed answer's, 0.33 on 64 seeds) to
>= 0.9. Measured on seeds 0-19 (30 steps, one torch thread): 0.33 -> 1.00 on every seed, 9-12 s a run on 2
busy cores.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from roll_envs import four_choice_baselines
from small_runs import imported_roots

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "minimal_grpo.py"
ALLOWED_IMPORTS = {"roll_envs", "roll_algos", "torch", "transformers", "numpy"}
"""What the script may import besides the standard library: no roll_rollout, roll_strategies, roll_pipeline."""
METRICS = (
    "charts/reward_mean",
    "charts/valid_answers",
    "losses/policy_loss",
    "losses/kl",
    "losses/approx_kl",
)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("minimal_grpo", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the defining module up
    spec.loader.exec_module(module)
    return module


def test_the_script_is_one_short_file_importing_only_roll_envs_roll_algos_and_its_libraries():
    source = SCRIPT.read_text()
    assert len(source.splitlines()) <= 300
    roots = imported_roots(source)
    assert roots - set(sys.stdlib_module_names) - ALLOWED_IMPORTS == set()
    assert {"roll_envs", "roll_algos"} <= roots


def test_the_command_line_maps_onto_args():
    script = load_script()
    args = script.parse_args(
        ["--model-path", "m", "--steps", "3", "--kl-coef", "0", "--system-prompt", "true"]
    )
    assert args == script.Args(model_path="m", steps=3, kl_coef=0.0, system_prompt=True)
    assert script.parse_args([]) == script.Args()


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    """The builtin tiny-four-choice model folder (built once into roll's cache: about 25 s on 2 cores)."""
    from roll_pipeline.models.cache import resolve_pretrain

    return Path(resolve_pretrain("builtin:tiny-four-choice"))


@pytest.fixture
def torch_threads():
    """The script sets torch's thread count; give the test process its own back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_default_arguments_teach_the_tiny_model_four_choice(tiny_model, torch_threads, capsys, seed):
    script = load_script()
    result = script.main(script.Args(model_path=str(tiny_model), seed=seed))
    best_fixed = four_choice_baselines(script.Args.eval_episodes)["best_fixed_answer"]
    before, after = result["success_before"], result["success_after"]
    assert result["best_fixed_answer"] == best_fixed
    assert before <= best_fixed + 0.1, f"seed {seed}: the untrained model already scores {before}"
    assert after >= 0.9 and after >= max(before, best_fixed) + 0.3, f"seed {seed}: {before} -> {after}"
    lines = capsys.readouterr().out.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == script.Args.steps and all(name in steps[-1] for name in METRICS)
    assert lines[-1].startswith(f"eval/success {after:.3f} after")
