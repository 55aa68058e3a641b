"""WebShop-lite: a WebShop-style shopping env over a generated, shipped catalogue (not the original WebShop).

Modules:
    vocabulary.py   the words the catalogue is generated from: departments, product types, attributes
    catalog.py      the products (shipped as catalog.json), the keyword search engine, the goals
    reward.py       the WebShop paper's purchase reward
    env.py          `WebShopLiteEnv`: search, click, buy
"""

from roll_envs.envs.webshop.catalog import (
    Goal,
    Product,
    SearchEngine,
    generate_catalog,
    load_catalog,
    make_goal,
)
from roll_envs.envs.webshop.env import WebShopLiteConfig, WebShopLiteEnv
from roll_envs.envs.webshop.reward import PurchaseScore, score_purchase

__all__ = [
    "Goal",
    "Product",
    "PurchaseScore",
    "SearchEngine",
    "WebShopLiteConfig",
    "WebShopLiteEnv",
    "generate_catalog",
    "load_catalog",
    "make_goal",
    "score_purchase",
]
