"""The WebShop-lite catalogue: products generated deterministically from `vocabulary`, shipped as
`catalog.json`, with a small keyword search engine and the goals an episode asks for.

Regenerate the shipped file with `python -m roll_envs.envs.webshop.catalog` (a test checks it is current).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from roll_envs.envs.webshop.vocabulary import ADJECTIVES, DEPARTMENTS, STOPWORDS

CATALOG_SEED = 20240607
"""Seed of the shipped catalogue."""

PRODUCTS_PER_TYPE = 15
"""Products generated per product type (48 types)."""

_TOKEN = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*")


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without stopwords."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


def terms(text: str) -> set[str]:
    """Search terms of a text: its tokens and its pairs of adjacent tokens (so phrases rank first)."""
    tokens = tokenize(text)
    return set(tokens) | {f"{a} {b}" for a, b in itertools.pairwise(tokens)}


@dataclass(frozen=True)
class Product:
    """One product of the catalogue."""

    asin: str
    title: str
    type_name: str
    query: str
    category: str
    attributes: list[str]
    options: dict[str, list[str]]
    price: float
    description: str
    nouns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Goal:
    """What the shopper wants: a target product's type, some of its attributes, one value per option, a price cap."""

    asin: str
    attributes: list[str]
    options: dict[str, str]
    price_upper: float
    text: str


def generate_catalog(seed: int = CATALOG_SEED, per_type: int = PRODUCTS_PER_TYPE) -> list[Product]:
    """Every product, in a fixed order; the same seed gives the same catalogue."""
    rng = random.Random(seed)
    products: list[Product] = []
    asins: set[str] = set()
    for dept in DEPARTMENTS:
        for type_name, query in dept.types:
            for _ in range(per_type):
                asin = "B0" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=8))
                while asin in asins:
                    asin = "B0" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=8))
                asins.add(asin)
                brand = rng.choice(dept.brands)
                attributes = rng.sample(dept.attributes, rng.randint(2, 4))
                options = {name: _some_of(rng, values) for name, values in dept.options}
                title = f"{brand} {rng.choice(ADJECTIVES).title()} {type_name.title()} - {', '.join(attributes[:2])}"
                low, high = dept.price
                products.append(
                    Product(
                        asin=asin,
                        title=title,
                        type_name=type_name,
                        query=query,
                        category=" › ".join(dept.path),
                        attributes=attributes,
                        options=options,
                        price=round(rng.uniform(low, high), 2),
                        description=f"This {type_name} is {' and '.join(attributes)}.",
                        nouns=[*brand.lower().split(), *type_name.split()],
                    )
                )
    return products


def _some_of(rng: random.Random, values: tuple[str, ...]) -> list[str]:
    """At least two of `values`, in their original order."""
    kept = set(rng.sample(values, rng.randint(2, len(values))))
    return [v for v in values if v in kept]


def catalog_path() -> Path:
    """Where the shipped catalogue lives."""
    return Path(str(resources.files("roll_envs.envs.webshop") / "catalog.json"))


def write_catalog(path: Path | None = None) -> Path:
    """Write the generated catalogue as JSON (one product per line, for readable diffs)."""
    target = path or catalog_path()
    lines = [json.dumps(asdict(p), ensure_ascii=False, sort_keys=True) for p in generate_catalog()]
    target.write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")
    return target


@cache
def load_catalog() -> tuple[Product, ...]:
    """The shipped catalogue (read once per process)."""
    data = json.loads(catalog_path().read_text(encoding="utf-8"))
    return tuple(Product(**row) for row in data)


class SearchEngine:
    """Keyword search: products ranked by the summed IDF of the query words and word pairs they contain."""

    def __init__(self, products: tuple[Product, ...]) -> None:
        self.products = products
        self.index: dict[str, list[int]] = {}
        for i, p in enumerate(products):
            fields = [p.title, p.type_name, p.query, p.category, *p.attributes]
            for token in set().union(*(terms(f) for f in fields)):
                self.index.setdefault(token, []).append(i)
        n = len(products)
        self.idf = {t: math.log(1 + n / len(ids)) for t, ids in self.index.items()}

    def search(self, query: str, limit: int = 50) -> list[int]:
        """Indices of the best `limit` products for `query` (ties broken by catalogue order)."""
        scores: dict[int, float] = {}
        for token in terms(" ".join(tokenize(query)[:32])):
            for i in self.index.get(token, ()):
                scores[i] = scores.get(i, 0.0) + self.idf[token]
        return sorted(scores, key=lambda i: (-scores[i], i))[:limit]


@cache
def default_engine() -> SearchEngine:
    """The search engine over the shipped catalogue (built once per process)."""
    return SearchEngine(load_catalog())


def make_goal(rng: random.Random, products: tuple[Product, ...]) -> Goal:
    """A goal drawn from a random target product, phrased like WebShop's instructions."""
    target = products[rng.randrange(len(products))]
    attributes = rng.sample(target.attributes, rng.randint(1, min(2, len(target.attributes))))
    options = {name: rng.choice(values) for name, values in target.options.items()}
    price_upper = float(math.ceil(target.price * rng.uniform(1.1, 1.8) / 10) * 10)
    wanted = " and ".join(attributes)
    option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
    text = (
        f"i need {wanted} {target.type_name}"
        + (f" with {option_text}" if option_text else "")
        + f", and price lower than {price_upper:.2f} dollars"
    )
    return Goal(target.asin, attributes, options, price_upper, text)


if __name__ == "__main__":
    print(f"wrote {write_catalog()}")
