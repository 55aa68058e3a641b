"""The `builtin:NAME` models, tiny Qwen2-architecture models built offline: `recipes.py` (what each is built
from), `warmup.py` (its supervised warm-up data), `cache.py` (`resolve_pretrain`: a `pretrain` value -> a
folder `from_pretrained` loads, building a builtin model once into the cache), `shipped_builds.py` (builtin
models that come built with the package, copied into the cache while they match their recipe), `hub.py` (a Hugging Face hub id
-> its snapshot folder in the Hugging Face cache, downloaded unless offline). The generic builder is
`roll_strategies.build_tiny_model`."""
