"""An unmodified OpenAI-client agent (examples/openai_agent/agent.py) trained by roll: every call it makes
through the training proxy trains on the ids the policy was given and sampled, never re-tokenised, and
the example trains 2 steps with the tiny model in process."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from small_runs import steps

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "openai_agent"
AGENT = f"{EXAMPLE / 'agent.py'}:run"


def test_the_example_agent_is_short_and_imports_nothing_of_roll() -> None:
    source = (EXAMPLE / "agent.py").read_text()
    assert len(source.splitlines()) <= 80
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"openai"}


def test_a_completion_that_re_tokenises_differently_trains_on_its_sampled_ids() -> None:
    from roll_pipeline.trainer.samples import build_samples
    from roll_rollout import EnvSlotSpec, EnvWorker, EpisodeJob, SamplingSettings, decode_trajectory
    from roll_rollout.testing import ScriptedPolicy
    from roll_rollout.worker import encode_jobs
    from roll_strategies.models.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(["Left"])
    sampled = tokenizer.encode(" ", add_special_tokens=False) + tokenizer.encode(
        "Left", add_special_tokens=False
    )
    canonical = tokenizer.encode(tokenizer.decode(sampled), add_special_tokens=False)
    assert len(sampled) == 2 and canonical != sampled  # " Left" is one token when encoded
    seen: list[list[int]] = []

    class Recording(ScriptedPolicy):
        async def generate(self, request: Any) -> Any:
            seen.append(list(request.prompt_ids))
            return await super().generate(request)

    config = {"agent": AGENT, "task_env": "four_choice", "agent_timeout_s": 60}
    spec = EnvSlotSpec(0, "Agent", "openai_agent", config, max_turns=3, max_context_tokens=2048)

    async def play() -> Any:
        worker = EnvWorker([spec], tokenizer, Recording(sampled))
        await worker.submit(encode_jobs([EpisodeJob(0, 0, 0, 0, SamplingSettings(max_new_tokens=8))]))
        try:
            for _ in range(120):
                out = msgpack.unpackb(await worker.poll(0.5))
                if out["done"]:
                    return decode_trajectory(out["done"][0])
            raise AssertionError("no episode finished")
        finally:
            worker.close()

    traj = asyncio.run(play())
    assert traj.error is None and len(traj.turns) == 3  # no tool call: the agent asks again, 3 rounds
    assert [t.prompt_ids for t in traj.turns] == seen
    assert all(t.response_ids == sampled for t in traj.turns)
    # the agent sent its first reply back as text: the next prompt holds it re-tokenised, the turn does not
    assert canonical[0] in seen[1][len(seen[0]) :]
    samples = build_samples([traj], pad_id=0, shape="step")
    for row, turn in enumerate(traj.turns):
        ids = samples.input_ids[row]
        assert ids[: len(turn.prompt_ids)].tolist() == turn.prompt_ids
        assert ids[samples.response_mask[row]].tolist() == sampled


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("custom_envs.Agent.env_config.agent=no_such_module:run", "does not load"),
        ("custom_envs.Agent.env_config.task_env=no_such_env", "task_env_type='no_such_env'"),
        ("sample_shape=trajectory", "set sample_shape=step"),
    ],
)
def test_the_config_check_says_what_is_wrong_with_an_agent_tag(override: str, says: str) -> None:
    from roll_pipeline.config.compose import ConfigError
    from roll_pipeline.preflight import compose

    base = ["cluster.backend=local", f"custom_envs.Agent.env_config.agent={AGENT}"]
    compose(str(EXAMPLE), "agent_four_choice", base, preflight=True)  # the example as it is passes
    with pytest.raises(ConfigError, match=re.escape(says)):
        compose(str(EXAMPLE), "agent_four_choice", [*base, override], preflight=True)


def _sampled(
    policy_record: list[tuple[list[int], Any]],
) -> dict[tuple[int, ...], list[tuple[list[int], list[float]]]]:
    """The policy's own record: per prompt (ids as the policy was given them), each (ids, log-probs) it sampled."""
    out: dict[tuple[int, ...], list[tuple[list[int], list[float]]]] = {}
    for prompt, result in policy_record:
        out.setdefault(tuple(prompt), []).append((list(result.output_ids), list(result.log_probs)))
    return out


def _assert_rows_are_what_the_policy_sampled(samples: Any, sampled: dict[tuple[int, ...], list[Any]]) -> None:
    """Each trained row is one call: its prompt ids as the policy was given them, then the response ids and
    log-probs the policy returned for them; no sample trains twice."""
    for row in range(samples.num_rows):
        ids, response = samples.input_ids[row], samples.response_mask[row]
        first = int(response.nonzero()[0])
        prompt = tuple(ids[:first].tolist())
        assert prompt in sampled, f"row {row}: a prompt the policy was never given ({len(prompt)} ids)"
        got_ids, got_lp = ids[response].tolist(), samples.infer_log_probs[row][response].tolist()
        same_ids = [lp for out, lp in sampled[prompt] if out == got_ids]
        assert same_ids, f"row {row}: response ids {got_ids} are none the policy sampled for this prompt"
        same = [i for i, (out, lp) in enumerate(sampled[prompt]) if out == got_ids and _close(lp, got_lp)]
        assert same, f"row {row}: log-probs {got_lp} are none the policy returned with these ids: {same_ids}"
        sampled[prompt].pop(same[0])


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 for x, y in zip(a, b, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_example_trains_two_steps_with_the_tiny_model(tmp_path: Path, monkeypatch: Any) -> None:
    """Trained rows checked against the policy server's own record of what it was given and sampled (a
    recording or re-tokenising bug in the proxy shows here), not against the turns the proxy built."""
    from roll_pipeline import AgenticPipeline
    from roll_pipeline.preflight import compose
    from roll_pipeline.runtime import policy_server
    from roll_pipeline.trainer import experience

    trained: list[Any] = []
    policy_record: list[tuple[list[int], Any]] = []
    build, generate = experience.build_samples, policy_server.PolicyServer._generate_batch

    def recording_build(trajs: Any, pad_id: int, shape: Any) -> Any:
        samples = build(trajs, pad_id, shape)
        trained.append(samples)
        return samples

    def recording_generate(self: Any, requests: Any) -> Any:
        results = generate(self, requests)
        policy_record.extend((list(r.prompt_ids), res) for r, res in zip(requests, results, strict=True))
        return results

    monkeypatch.setattr(experience, "build_samples", recording_build)
    monkeypatch.setattr(policy_server.PolicyServer, "_generate_batch", recording_generate)
    overrides = [
        *steps(2),
        "cluster.backend=local",
        f"output_dir={tmp_path}",
        "train_env_manager.num_env_groups=2",
        "val_env_manager.num_env_groups=4",
        f"custom_envs.Agent.env_config.agent={AGENT}",
    ]
    config = compose(str(EXAMPLE), "agent_four_choice", overrides, preflight=True)
    pipeline = AgenticPipeline(config, progress=False)
    try:
        summary = pipeline.run()
    finally:
        pipeline.close()
    assert summary.steps == 2
    rows = [json.loads(x) for x in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["step"] > 0 and "critic/score/mean" in r] == [1, 2]
    assert all(r.get("val/failed_episodes", 0) == 0 for r in rows)
    assert len(trained) == 2 and all(s.num_rows > 0 for s in trained)
    sampled = _sampled(policy_record)
    for samples in trained:
        _assert_rows_are_what_the_policy_sampled(samples, sampled)
