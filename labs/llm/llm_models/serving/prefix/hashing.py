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
from collections.abc import Callable, Iterable, Sequence
from typing import overload

BlockHash = bytes
# The first block's parent (vLLM seeds it; a constant here: one server, one model). A request's cache_salt replaces it
# with a root of its own (root_hash), so one tenant's chains never meet another's.
NONE_HASH: BlockHash = hashlib.sha256(b"kv-serving prefix cache: no parent").digest()


def root_hash(salt: str | None) -> BlockHash:
    """The first block's parent: NONE_HASH, or for a request with a ``cache_salt`` (vLLM's field) a hash of it, so
    that a salted prompt's blocks hash apart from the same tokens under any other salt or none. Another tenant can
    then neither reuse them nor tell by a faster first token that they were cached."""
    if salt is None:
        return NONE_HASH
    return hashlib.sha256(NONE_HASH + b"\0cache_salt\0" + salt.encode("utf-8", "surrogatepass")).digest()


def hash_block(parent: BlockHash, tokens: Sequence[int], extra: tuple[str, ...] = ()) -> BlockHash:
    """The hash of one full block: its parent's hash, its token ids (each as 8 bytes) and ``extra`` keys (for
    what else shapes its keys and values, such as an adapter: none in this engine)."""
    digest = hashlib.sha256(parent)
    digest.update(struct.pack(f"<I{len(tokens)}q", len(tokens), *tokens))
    for key in extra:
        digest.update(b"\0" + key.encode())
    return digest.digest()


def block_hashes(tokens: Sequence[int], block_size: int, extra: tuple[str, ...] = (),
                 salt: str | None = None) -> list[BlockHash]:
    """The chained hashes of every full block of ``tokens``, first block first (a partial tail has none), from the
    root of ``salt`` (root_hash)."""
    return chained(tokens, block_size, len(tokens), lambda parent, page: hash_block(parent, page, extra),
                   root=root_hash(salt))


Hasher = Callable[[BlockHash, Sequence[int]], BlockHash]  # (parent's hash, a full block's tokens) -> its hash


def chained(tokens: Sequence[int], block_size: int, count: int, hasher: Hasher,
            known: Sequence[BlockHash] = (), root: BlockHash = NONE_HASH) -> list[BlockHash]:
    """The first ``count`` full blocks' hashes of ``tokens`` (fewer if it holds fewer), each from its parent's by
    ``hasher``, the first from ``root``; ``known``: the first ones, already computed, extended rather than computed
    again."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    hashes = list(known)
    parent = hashes[-1] if hashes else root
    for index in range(len(hashes), min(count, len(tokens) // block_size)):
        parent = hasher(parent, tokens[index * block_size:(index + 1) * block_size])
        hashes.append(parent)
    return hashes


class BlockKeys(Sequence[int]):
    """A request's tokens with their full blocks' hashes kept as they are computed, as vLLM keeps each request's
    block hashes: a waiting prompt is looked up on every submit (the TTFT bound), on every admission pass and in
    every longest-prefix sort, and each lookup would otherwise hash the whole prompt again. Tokens are only ever
    appended (a decode step's fed-back token), so a hash, once computed, stays right. ``salt``: the request's
    cache_salt, whose root its chain starts from (root_hash; a radix index keeps a tree per salt)."""

    def __init__(self, tokens: Iterable[int] = (), salt: str | None = None) -> None:
        self.tokens: list[int] = list(tokens)
        self.salt = salt
        self._hashes: list[BlockHash] = []
        self._by: tuple[int, Hasher] | None = None  # the block size and hasher the kept hashes were made with

    def __len__(self) -> int:
        return len(self.tokens)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self.tokens[index]  # a slice is a plain list: it keeps no hashes

    def extend(self, tokens: Iterable[int]) -> None:
        self.tokens.extend(tokens)

    def hashes(self, block_size: int, count: int, hasher: Hasher) -> list[BlockHash]:
        """The first ``count`` full blocks' hashes, computing only those not kept yet (all of them again for another
        block size or hasher)."""
        if self._by != (block_size, hasher):
            self._by, self._hashes = (block_size, hasher), []
        self._hashes = chained(self.tokens, block_size, count, hasher, self._hashes, root_hash(self.salt))
        return self._hashes[:count]
