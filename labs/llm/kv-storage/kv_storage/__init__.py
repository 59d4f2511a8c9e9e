"""Key/value storage beyond concatenation: preallocated buffers and a paged block pool.

The decoder block is the KV-cache lab's own, reused as is (not a copy): both
stores implement its ``KVStore`` protocol, so ``DecoderBlock.forward`` writes
into them in place.
"""

from .paged import BlockPool, PagedSequence, PoolExhausted
from .preallocated import PreallocatedKVCache

__all__ = ["BlockPool", "PagedSequence", "PoolExhausted", "PreallocatedKVCache"]
