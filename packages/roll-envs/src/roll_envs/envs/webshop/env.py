"""WebShop-lite: a WebShop-style shopping task over a generated catalogue (not the original WebShop).

Pages and actions follow WebShop's text mode: a search page (`search[query]`), result pages of
ten products, item pages with options, and `Buy Now`, all with `click[...]`. Buying ends the
episode with the paper's reward (`roll_envs.envs.webshop.reward`); success is a reward of 1.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from roll_envs.base import BASE_METRICS, ActionOutcome, Aggregation, BaseEnv
from roll_envs.config import EnvConfig, turns_field
from roll_envs.envs.webshop.catalog import Goal, Product, default_engine, load_catalog, make_goal
from roll_envs.envs.webshop.reward import score_purchase

RESULTS_PER_PAGE = 10
_ACTION = re.compile(r"^(search|click)\s*\[\s*(.*?)\s*\]$", re.IGNORECASE | re.DOTALL)
SEP = " [SEP] "


class WebShopLiteConfig(EnvConfig):
    """Config of `WebShopLiteEnv` (plus `max_steps`, `format_penalty`, `max_actions_per_turn`)."""

    max_steps: int = turns_field(15, le=1000)
    show_available_actions: bool = Field(True, description="list the available actions under each page")


class WebShopLiteEnv(BaseEnv):
    """Shop for the product the instruction describes: search, open a product, pick its options, buy it."""

    config_cls = WebShopLiteConfig
    owns_random_state = True  # draws only from the episode rng (np_random and generators seeded from it)
    config: WebShopLiteConfig
    metric_aggregation: ClassVar[Mapping[str, Aggregation]] = {
        **BASE_METRICS,
        "score": "last",
        "purchased": "last",
    }

    def __init__(self, config: Any = None, *, render_mode: str | None = "text", **overrides: Any) -> None:
        super().__init__(config, render_mode=render_mode, **overrides)
        self.products = load_catalog()
        self.by_asin = {p.asin: i for i, p in enumerate(self.products)}
        self.engine = default_engine()
        self.goal: Goal | None = None
        self._open_search()

    @property
    def instruction(self) -> str:
        """The system prompt."""
        return (
            "You are shopping online. Find the product the instruction asks for and buy it. "
            "On the search page use search[keywords]. Then use click[...] on a product id, on its options "
            "(such as size or color), on Next >, < Prev or Back to Search, and finally on Buy Now. "
            f"Answer with one action, like {self.format_answer('search[red shoes]')} or "
            f"{self.format_answer('click[Buy Now]')}."
        )

    @property
    def valid_actions(self) -> list[str]:
        """The actions available on the current page (on the search page: a search per product type)."""
        if self.page == "search":
            return sorted({f"search[{p.query}]" for p in self.products})
        return [f"click[{c}]" for c in self._clickables()]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Draw a goal from `rng` (or take `options["goal"]`) and open the search page."""
        goal = options.get("goal")
        self.goal = (
            goal
            if isinstance(goal, Goal)
            else make_goal(random.Random(int(rng.integers(2**63))), self.products)
        )
        self._open_search()

    def _open_search(self) -> None:
        """The state an episode starts in: the search page, nothing found, chosen or bought."""
        self.page, self.sub_page, self.result_page = "search", "", 1
        self.results: list[int] = []
        self.item: Product | None = None
        self.chosen: dict[str, str] = {}
        self.score, self.purchased = 0.0, False

    def match_action(self, token: str) -> str | None:
        """`search[...]` on the search page, `click[x]` for x clickable on the current page (any case, runs
        of whitespace read as one space)."""
        m = _ACTION.match(" ".join(token.split()))
        if not m:
            return None
        verb, arg = m.group(1).lower(), m.group(2)
        if verb == "search":
            return f"search[{arg.lower()}]" if self.page == "search" and 0 < len(arg) <= 200 else None
        wanted = arg.lower()
        return next((f"click[{c}]" for c in self._clickables() if c.lower() == wanted), None)

    def apply_action(self, action: str) -> ActionOutcome:
        """Move between pages, select options, or buy."""
        before = (self.page, self.result_page, self.sub_page, tuple(self.chosen.items()), self.item)
        verb, arg = action.split("[", 1)
        arg = arg[:-1]
        if verb == "search":
            self.results, self.result_page, self.page = self.engine.search(arg), 1, "results"
        else:
            self._click(arg)
        if self.purchased:
            return ActionOutcome(self.score, True, True)
        after = (self.page, self.result_page, self.sub_page, tuple(self.chosen.items()), self.item)
        return ActionOutcome(0.0, False, after != before)

    def _click(self, target: str) -> None:
        key = target.lower()
        item = self.item
        if key == "back to search":
            self.page, self.item, self.chosen, self.sub_page = "search", None, {}, ""
        elif key == "next >":
            self.result_page += 1
        elif key == "< prev":
            if self.page == "item_sub":
                self.page, self.sub_page = "item", ""
            elif self.page == "item":
                self.page, self.item, self.chosen = "results", None, {}
            else:
                self.result_page -= 1
        elif key in ("description", "features"):
            self.page, self.sub_page = "item_sub", key
        elif key == "buy now" and item is not None:
            target_product = self.products[self.by_asin[self.goal.asin]]
            self.score = score_purchase(item, self.chosen, self.goal, target_product).reward
            self.purchased = True
        elif self.page == "results":
            self.item = self.products[self.by_asin[target.upper()]]
            self.page, self.chosen = "item", {}
        elif item is not None:
            for name, values in item.options.items():
                if target in values:
                    self.chosen[name] = target

    def _page_results(self) -> list[Product]:
        start = (self.result_page - 1) * RESULTS_PER_PAGE
        return [self.products[i] for i in self.results[start : start + RESULTS_PER_PAGE]]

    def _clickables(self) -> list[str]:
        if self.page == "results":
            more = len(self.results) > self.result_page * RESULTS_PER_PAGE
            nav = (
                ["Back to Search"]
                + (["< Prev"] if self.result_page > 1 else [])
                + (["Next >"] if more else [])
            )
            return nav + [p.asin.lower() for p in self._page_results()]
        if self.page == "item" and self.item is not None:
            values = [v for vs in self.item.options.values() for v in vs]
            return ["Back to Search", "< Prev", *values, "Description", "Features", "Buy Now"]
        if self.page == "item_sub":
            return ["Back to Search", "< Prev"]
        return []

    def text_observation(self) -> str:
        """The current page in WebShop's text mode ([SEP]-separated), then the available actions."""
        assert self.goal is not None
        head = ["Instruction:", self.goal.text]
        if self.purchased:
            parts = [
                "Thank you for shopping with us!",
                *head,
                f"Your score (min 0.0, max 1.0): {self.score:.2f}",
            ]
        elif self.page == "search":
            parts = ["WebShop", *head, "Search"]
        elif self.page == "results":
            parts = [*head, "Back to Search", f"Page {self.result_page} (Total results: {len(self.results)})"]
            parts += ["< Prev"] if self.result_page > 1 else []
            parts += ["Next >"] if len(self.results) > self.result_page * RESULTS_PER_PAGE else []
            for p in self._page_results():
                parts += [p.asin, p.title, f"${p.price:.2f}"]
        else:
            parts = [*head, "Back to Search", "< Prev", *self._item_parts()]
        text = SEP.join(parts)
        if self.config.show_available_actions and not self.purchased:
            text += "\nAvailable actions: " + (
                "search[<keywords>]"
                if self.page == "search"
                else ", ".join(f"click[{c}]" for c in self._clickables())
            )
        return text

    def _item_parts(self) -> list[str]:
        item = self.item
        assert item is not None
        if self.page == "item_sub":
            return [item.description] if self.sub_page == "description" else list(item.attributes)
        parts: list[str] = []
        for name, values in item.options.items():
            parts += [name, *values]
        parts += [
            item.title,
            f"Price: ${item.price:.2f}",
            "Rating: N.A.",
            "Description",
            "Features",
            "Buy Now",
        ]
        if self.chosen:
            parts.append("Selected: " + ", ".join(f"{k}: {v}" for k, v in self.chosen.items()))
        return parts

    def is_success(self) -> bool:
        """Bought a product scoring 1."""
        return self.purchased and self.score >= 1.0

    def episode_metrics(self) -> dict[str, float]:
        """`score` (the purchase reward, 0 before buying) and `purchased`, both aggregated with `last`."""
        return {"score": float(self.score), "purchased": float(self.purchased)}
