"""WebShop-lite: a WebShop-style shopping env over a generated, shipped catalogue (not the original WebShop)."""

from roll_envs.webshop.catalog import Goal, Product, SearchEngine, generate_catalog, load_catalog, make_goal
from roll_envs.webshop.env import WebShopLiteConfig, WebShopLiteEnv
from roll_envs.webshop.reward import PurchaseScore, score_purchase

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
