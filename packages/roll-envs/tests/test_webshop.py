"""WebShop-lite: shipped catalogue, pages and actions, and the paper's reward on hand-computed cases."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import roll_envs
from roll_envs.envs.webshop import (
    Goal,
    WebShopLiteEnv,
    generate_catalog,
    load_catalog,
    make_goal,
    score_purchase,
)
from roll_envs.envs.webshop.catalog import catalog_path, default_engine
from roll_envs.envs.webshop.reward import type_reward


def answer(action: str) -> str:
    return f"<answer>{action}</answer>"


def target_of(env: WebShopLiteEnv):
    return env.products[env.by_asin[env.goal.asin]]


def test_shipped_catalogue_is_the_generated_one():
    shipped = json.loads(catalog_path().read_text(encoding="utf-8"))
    assert shipped == [dataclasses.asdict(p) for p in generate_catalog()]
    products = load_catalog()
    assert len(products) == 720 and len({p.asin for p in products}) == 720
    assert all(len(values) >= 2 for p in products for values in p.options.values())
    env = WebShopLiteEnv()
    for seed in range(2000):  # every goal draw works
        env.reset(seed=seed)


def test_goals_are_deterministic_and_satisfiable():
    products = load_catalog()
    for seed in range(200):
        goal = make_goal(random.Random(seed), products)
        assert goal == make_goal(random.Random(seed), products)
        target = next(p for p in products if p.asin == goal.asin)
        assert set(goal.attributes) <= set(target.attributes) and goal.price_upper >= target.price
        assert all(v in target.options[k] for k, v in goal.options.items())
        assert score_purchase(target, dict(goal.options), goal, target).reward == 1.0
        assert goal.text.startswith("i need") and "price lower than" in goal.text


def test_search_finds_the_target_type():
    engine = default_engine()
    for seed in range(50):
        goal = make_goal(random.Random(seed), engine.products)
        target = next(p for p in engine.products if p.asin == goal.asin)
        hits = [
            engine.products[i] for i in engine.search(" ".join([*goal.attributes, target.type_name]))[:10]
        ]
        assert any(p.type_name == target.type_name for p in hits)
    assert engine.search("") == [] and engine.search("zzzz qqqq") == []


def test_reward_parts_by_hand():
    products = load_catalog()
    target = products[0]
    goal = Goal(
        target.asin, target.attributes[:2], {k: v[0] for k, v in target.options.items()}, 1000.0, "goal"
    )
    n_opt = len(goal.options)
    denominator = 2 + n_opt + 1
    no_options = score_purchase(target, {}, goal, target)
    assert no_options.reward == pytest.approx((2 + 0 + 1) / denominator) and no_options.r_type == 1.0
    expensive = dataclasses.replace(goal, price_upper=target.price - 0.01)
    assert score_purchase(target, dict(goal.options), expensive, target).reward == pytest.approx(
        (2 + n_opt) / denominator
    )
    other_dept = next(p for p in products if p.category.split("›")[0] != target.category.split("›")[0])
    assert type_reward(other_dept, target) == 0.0  # no shared noun: wrong type
    same_type = next(p for p in products if p.type_name == target.type_name and p.asin != target.asin)
    assert type_reward(same_type, target) == 1.0


def test_full_episode_to_a_perfect_purchase():
    env = WebShopLiteEnv()
    obs, info = env.reset(seed=4)
    assert obs.startswith("WebShop [SEP] Instruction:") and info["success"] is False
    target = target_of(env)
    obs, *_ = env.step(answer(f"search[{target.title}]"))
    assert target.asin in obs and "Page 1" in obs
    obs, *_ = env.step(answer(f"click[{target.asin.lower()}]"))
    assert "Buy Now" in obs and target.title in obs
    for value in env.goal.options.values():
        _, reward, terminated, _, info = env.step(answer(f"click[{value.upper()}]"))
        assert reward == 0.0 and not terminated and info["action_is_effective"]
    obs, reward, terminated, truncated, info = env.step(answer("click[Buy Now]"))
    assert reward == 1.0 and terminated and not truncated and info["success"]
    assert info["metrics"]["score"] == 1.0 and "Your score" in obs


def test_navigation_and_invalid_actions():
    env = WebShopLiteEnv()
    env.reset(seed=1)
    _, _, _, _, info = env.step(answer("click[Buy Now]"))  # nothing to click on the search page
    assert not info["action_is_valid"]
    env.step(answer("search[hoodie]"))
    _, _, _, _, info = env.step(answer("search[jeans]"))  # no search bar on results pages
    assert not info["action_is_valid"]
    obs, *_ = env.step(answer("click[Next >]"))
    assert "Page 2" in obs and "< Prev" in obs
    first = env.valid_actions[-1]
    obs, *_ = env.step(answer(first))
    assert "Buy Now" in obs
    obs, *_ = env.step(answer("click[Features]"))
    assert "Buy Now" not in obs
    env.step(answer("click[< Prev]"))
    env.step(answer("click[< Prev]"))
    assert env.page == "results" and env.result_page == 2
    obs, *_ = env.step(answer("click[back to search]"))
    assert obs.startswith("WebShop")


def test_wrong_product_scores_partially_and_truncation_scores_zero():
    env = WebShopLiteEnv()
    env.reset(seed=2)
    target = target_of(env)
    env.step(answer(f"search[{target.type_name}]"))
    other = next(
        a for a in env.valid_actions if a.startswith("click[b0") and a != f"click[{target.asin.lower()}]"
    )
    env.step(answer(other))
    _, reward, terminated, _, info = env.step(answer("click[Buy Now]"))
    assert terminated and 0.0 < reward < 1.0 and not info["success"]
    env = roll_envs.make("webshop_lite", max_steps=2)
    env.reset(seed=2)
    env.step(answer("search[tea]"))
    _, reward, terminated, truncated, info = env.step(answer("click[< Prev]"))
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
