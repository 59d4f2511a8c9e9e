"""A full block's identity: the hash of its parent block's hash, its own token ids and any extra keys (vLLM).

Chaining makes a block's hash stand for the whole prefix that ends with it: two prompts that differ anywhere before
a block give it different hashes even when the block's own tokens agree, so a lookup can never hand a request keys
computed after another prefix. Only full blocks are hashed: a partly filled block is still being written.

SHA-256 over a fixed byte encoding, so a hash is the same in every process and run (Python's ``hash`` of a tuple
is salted per process for strings and is only 64 bits).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

BlockHash = bytes
# The first block's parent (vLLM seeds it; a constant here: one server, one model, nothing to separate).
NONE_HASH: BlockHash = hashlib.sha256(b"kv-serving prefix cache: no parent").digest()


def hash_block(parent: BlockHash, tokens: Sequence[int], extra: tuple[str, ...] = ()) -> BlockHash:
    """The hash of one full block: its parent's hash, its token ids (each as 8 bytes) and ``extra`` keys (for
    what else shapes its keys and values, such as an adapter: none in this engine)."""
    digest = hashlib.sha256(parent)
    digest.update(struct.pack(f"<I{len(tokens)}q", len(tokens), *tokens))
    for key in extra:
        digest.update(b"\0" + key.encode())
    return digest.digest()


def block_hashes(tokens: Sequence[int], block_size: int, extra: tuple[str, ...] = ()) -> list[BlockHash]:
    """The chained hashes of every full block of ``tokens``, first block first (a partial tail has none)."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    hashes, parent = [], NONE_HASH
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block(parent, tokens[start:start + block_size], extra)
        hashes.append(parent)
    return hashes
