"""The purchase reward of the WebShop paper (Yao et al., 2022), on WebShop-lite's catalogue.

    reward = r_type * (matched attributes + matched options + [price <= cap]) / (attributes + options + 1)

r_type is 1 when the bought product is of the wanted type (same query, or at least two shared
category levels, or more than 20% of the wanted title's nouns), 0.5 when only a few nouns match,
0.1 below 10% of the nouns and 0 with none. Nouns are recorded at generation (no NLP parser).
"""

from __future__ import annotations

from typing import NamedTuple

from roll_envs.envs.webshop.catalog import Goal, Product


class PurchaseScore(NamedTuple):
    """The reward and its parts."""

    reward: float
    r_type: float
    attributes_matched: int
    options_matched: int
    price_ok: bool


def type_reward(bought: Product, target: Product) -> float:
    """WebShop's r_type: 1, 0.5, 0.1 or 0 by query, category and title-noun overlap."""
    query_match = bought.query == target.query
    shared_levels = {c.strip() for c in bought.category.split("›")} & {
        c.strip() for c in target.category.split("›")
    }
    category_match = len(shared_levels) >= 2
    wanted = set(target.nouns)
    title_score = 0.2 if not wanted else len(wanted & set(bought.nouns)) / len(wanted)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def score_purchase(bought: Product, chosen: dict[str, str], goal: Goal, target: Product) -> PurchaseScore:
    """Score buying `bought` with the option values `chosen` against `goal` (whose product is `target`)."""
    text = f"{bought.title} {bought.description}".lower()
    attributes = sum(1 for a in goal.attributes if a in bought.attributes or a in text)
    chosen_values = {v.lower() for v in chosen.values()}
    options = sum(1 for v in goal.options.values() if v.lower() in chosen_values)
    price_ok = bought.price <= goal.price_upper
    r_type = type_reward(bought, target)
    total = (attributes + options + price_ok) / (len(goal.attributes) + len(goal.options) + 1)
    return PurchaseScore(round(total * r_type, 6), r_type, attributes, options, price_ok)
