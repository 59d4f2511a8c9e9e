"""Automatic prefix caching: keys and values of full blocks kept across requests, found again by their tokens.

Three small modules, ordered bottom-up:

- ``hashing``: a full block's identity, a hash chained over its parent block's hash and its own token ids (vLLM);
- ``indexes``: two ways to find a prompt's cached blocks and to choose which cached block to give up when the pool
  needs one: ``HashIndex`` (vLLM's hash map and least-recently-freed queue) and ``RadixIndex`` (SGLang's tree of
  token pages, least recently used leaf first);
- ``pool``: ``CachingPool``, the serving pool with reference counts whose freed blocks stay cached until needed.

The scheduler (``llm_models.serving.scheduler``) looks a prompt up before admitting it, prefills only what it did not find,
and offers every block it fills to the index.

``hashing`` and ``indexes`` are torch-free (the lab's pictures draw from them at build time); ``pool`` holds tensors
and is imported when ``CachingPool`` or ``PrefixStats`` is first asked for.
"""

from typing import Any

from .hashing import NONE_HASH, BlockHash, BlockKeys, block_hashes, hash_block
from .indexes import INDEXES, HashIndex, PrefixIndex, RadixIndex


def __getattr__(name: str) -> Any:
    if name in ("CachingPool", "PrefixStats"):
        from . import pool

        return getattr(pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["INDEXES", "NONE_HASH", "BlockHash", "BlockKeys", "CachingPool", "HashIndex", "PrefixIndex", "PrefixStats",
           "RadixIndex", "block_hashes", "hash_block"]
