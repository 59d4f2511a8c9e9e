"""Key/value storage beyond concatenation: preallocated buffers and a paged block pool.

The decoder block is the KV-cache lab's own, reused as is (not a copy): both
stores implement its ``KVStore`` protocol, so ``DecoderBlock.forward`` writes
into them in place.
"""

import sys
from pathlib import Path

_KV_CACHE_LAB = Path(__file__).resolve().parents[2] / "kv-cache"
if str(_KV_CACHE_LAB) not in sys.path:  # the lab folder's name has a hyphen, so it is not a package
    sys.path.insert(0, str(_KV_CACHE_LAB))

from .paged import BlockPool, PagedSequence, PoolExhausted  # noqa: E402
from .preallocated import PreallocatedKVCache  # noqa: E402

__all__ = ["BlockPool", "PagedSequence", "PoolExhausted", "PreallocatedKVCache"]
