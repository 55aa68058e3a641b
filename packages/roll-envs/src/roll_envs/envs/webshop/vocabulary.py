"""The words the WebShop-lite catalogue is generated from: departments, product types, attributes, options.

Modelled on the kinds of products, attributes ("machine washable", "gluten free") and options
(size, color, flavor, ...) of the WebShop dataset, written by hand; no WebShop data is included.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Department:
    """A family of products sharing a category path, attributes, options and a price range."""

    path: tuple[str, ...]
    types: tuple[tuple[str, str], ...]  # (product type name, the shopper's query that finds it)
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]
    brands: tuple[str, ...]


COLORS = ("black", "white", "navy blue", "red", "grey", "green", "pink", "beige", "brown", "purple")

DEPARTMENTS: tuple[Department, ...] = (
    Department(
        ("clothing shoes jewelry", "men", "clothing"),
        (
            ("hoodie", "men's hoodies"),
            ("t-shirt", "men's t-shirts"),
            ("jeans", "men's jeans"),
            ("rain jacket", "men's jackets"),
        ),
        ("machine washable", "relaxed fit", "long sleeve", "cotton blend", "quick drying", "button closure"),
        (("size", ("small", "medium", "large", "x-large", "xx-large")), ("color", COLORS)),
        (12.0, 90.0),
        ("Northpeak", "Urbanwear", "Trailmark", "Cobalt&Co"),
    ),
    Department(
        ("clothing shoes jewelry", "women", "shoes"),
        (
            ("running shoes", "women's running shoes"),
            ("ankle boots", "women's boots"),
            ("sandals", "women's sandals"),
            ("slippers", "women's slippers"),
        ),
        ("non slip", "rubber sole", "memory foam", "arch support", "lightweight", "waterproof"),
        (("size", ("6", "7", "7.5", "8", "8.5", "9", "10")), ("color", COLORS)),
        (18.0, 140.0),
        ("Stridea", "Softstep", "Peakline", "Lumo"),
    ),
    Department(
        ("grocery gourmet food", "beverages", "coffee tea"),
        (
            ("coffee beans", "whole bean coffee"),
            ("green tea", "green tea bags"),
            ("cold brew", "cold brew coffee"),
            ("herbal tea", "herbal tea"),
        ),
        ("gluten free", "organic", "non gmo", "fair trade", "caffeine free", "low sugar"),
        (
            ("flavor", ("original", "vanilla", "hazelnut", "mint", "chai", "caramel")),
            ("size", ("12 ounce", "1 pound", "2 pound", "20 count", "40 count")),
        ),
        (6.0, 45.0),
        ("Morning Ritual", "Highland Roast", "Leafwell", "Bean Theory"),
    ),
    Department(
        ("grocery gourmet food", "snacks", "bars"),
        (
            ("protein bars", "protein bars"),
            ("granola", "granola"),
            ("trail mix", "trail mix"),
            ("rice crackers", "rice crackers"),
        ),
        ("gluten free", "high protein", "keto friendly", "vegan", "low sugar", "individually wrapped"),
        (
            ("flavor", ("chocolate", "peanut butter", "berry", "sea salt", "honey", "cinnamon")),
            ("size", ("6 count", "12 count", "24 count", "1 pound")),
        ),
        (5.0, 40.0),
        ("Crunchly", "Goodfuel", "Nature Bite", "Trailside"),
    ),
    Department(
        ("beauty personal care", "hair care", "shampoo conditioner"),
        (
            ("shampoo", "shampoo for dry hair"),
            ("conditioner", "hair conditioner"),
            ("hair oil", "hair oil"),
            ("dry shampoo", "dry shampoo"),
        ),
        (
            "sulfate free",
            "paraben free",
            "cruelty free",
            "natural ingredients",
            "long lasting",
            "for dry hair",
        ),
        (
            ("scent", ("coconut", "lavender", "citrus", "unscented", "rose", "tea tree")),
            ("size", ("8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz")),
        ),
        (7.0, 50.0),
        ("Silkroot", "Pure Bloom", "Herbwell", "Lustre"),
    ),
    Department(
        ("beauty personal care", "skin care", "face"),
        (
            ("face moisturizer", "face moisturizer"),
            ("sunscreen", "face sunscreen"),
            ("eye cream", "eye cream"),
            ("cleanser", "face cleanser"),
        ),
        (
            "fragrance free",
            "for sensitive skin",
            "dermatologist tested",
            "cruelty free",
            "oil free",
            "spf 30",
        ),
        (("size", ("1 fl oz", "1.7 fl oz", "3.4 fl oz", "6.8 fl oz")),),
        (9.0, 80.0),
        ("Dermacalm", "Glowday", "Clearleaf", "Aquavera"),
    ),
    Department(
        ("electronics", "accessories", "phone accessories"),
        (
            ("phone case", "iphone case"),
            ("charging cable", "usb c cable"),
            ("screen protector", "screen protector"),
            ("wireless charger", "wireless charger"),
        ),
        ("fast charging", "shockproof", "easy to install", "scratch resistant", "slim fit", "durable"),
        (("color", COLORS), ("size", ("3 ft", "6 ft", "10 ft", "iphone 14", "iphone 15", "galaxy s23"))),
        (8.0, 60.0),
        ("Voltix", "Armorline", "Zenpower", "Clearguard"),
    ),
    Department(
        ("electronics", "audio", "headphones"),
        (
            ("wireless earbuds", "wireless earbuds"),
            ("over ear headphones", "headphones"),
            ("bluetooth speaker", "bluetooth speaker"),
            ("sleep headphones", "sleep headphones"),
        ),
        (
            "noise cancelling",
            "long battery life",
            "water resistant",
            "built in microphone",
            "hands free",
            "lightweight",
        ),
        (("color", COLORS),),
        (20.0, 200.0),
        ("Sonara", "Bassline", "Quietwave", "Echofield"),
    ),
    Department(
        ("home kitchen", "kitchen dining", "cookware"),
        (
            ("frying pan", "non stick frying pan"),
            ("chef knife", "kitchen knife"),
            ("cutting board", "cutting board"),
            ("storage containers", "food storage containers"),
        ),
        ("dishwasher safe", "non stick", "bpa free", "easy to clean", "heavy duty", "stainless steel"),
        (("size", ("8 inch", "10 inch", "12 inch", "set of 3", "set of 5")), ("color", COLORS)),
        (10.0, 120.0),
        ("Copperleaf", "Kitchenry", "Ironhaus", "Freshkeep"),
    ),
    Department(
        ("home kitchen", "bedding", "sheets pillows"),
        (
            ("bed sheets", "bed sheet set"),
            ("pillow", "bed pillow"),
            ("weighted blanket", "weighted blanket"),
            ("duvet cover", "duvet cover"),
        ),
        ("machine washable", "hypoallergenic", "breathable", "wrinkle free", "cooling", "soft"),
        (("size", ("twin", "full", "queen", "king")), ("color", COLORS)),
        (20.0, 150.0),
        ("Dreamloft", "Cozynest", "Linenly", "Nightcalm"),
    ),
    Department(
        ("sports outdoors", "fitness", "yoga"),
        (
            ("yoga mat", "yoga mat"),
            ("resistance bands", "resistance bands"),
            ("water bottle", "water bottle"),
            ("foam roller", "foam roller"),
        ),
        ("non slip", "eco friendly", "extra thick", "leak proof", "bpa free", "portable"),
        (("color", COLORS), ("size", ("standard", "large", "24 ounce", "32 ounce"))),
        (9.0, 70.0),
        ("Flexcore", "Zenfit", "Summitgear", "Hydrapeak"),
    ),
    Department(
        ("pet supplies", "dogs", "toys beds"),
        (
            ("dog bed", "dog bed"),
            ("chew toy", "dog chew toy"),
            ("dog leash", "dog leash"),
            ("dog harness", "dog harness"),
        ),
        ("machine washable", "durable", "non toxic", "reflective", "orthopedic", "easy to clean"),
        (("size", ("small", "medium", "large", "x-large")), ("color", COLORS)),
        (8.0, 90.0),
        ("Pawsome", "Barkley", "Tailwag", "Furhaven"),
    ),
)
"""Every department of the generated catalogue."""

ADJECTIVES = ("classic", "premium", "everyday", "essential", "ultra", "pro", "deluxe", "compact")
"""Title words that carry no attribute."""

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "the",
        "of",
        "for",
        "with",
        "in",
        "on",
        "to",
        "by",
        "from",
        "i",
        "am",
        "is",
        "are",
        "looking",
        "need",
        "want",
        "would",
        "like",
        "it",
        "that",
        "this",
        "my",
        "me",
        "price",
        "lower",
        "than",
        "dollars",
        "size",
        "color",
        "flavor",
        "scent",
    ]
)
"""Words ignored when titles and queries are compared."""
