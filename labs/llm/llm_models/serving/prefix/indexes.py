"""Two indexes over one pool's cached blocks: what a prompt finds, and which cached block goes when one is needed.

Both find the same blocks for a prompt (the longest run of full blocks whose tokens, from position 0, were computed
before and are still cached): the tests check it. They differ in what they evict.

- ``HashIndex`` (vLLM's automatic prefix caching): a map from each full block's chained hash to its block. Eviction
  takes the front of the pool's free queue, every free block in the order it was freed, cached or not: a block
  freed long ago goes first, and of one request's blocks, freed tail first, the end of the longest prefix goes
  before its parents. A cached block whose parent was evicted stays cached but can no longer be reached (a lookup
  stops at the first miss) until the queue reaches it.
- ``RadixIndex`` (SGLang's RadixAttention): a tree whose root-to-node paths are cached token sequences, one page
  (a block's tokens) per edge. Eviction takes a free block that caches nothing if there is one, else the least
  recently used free leaf: a parent is never evicted before its cached children, so nothing cached is unreachable.
  SGLang merges chains of single-child nodes into one edge; that saves node objects and changes no hit or
  eviction, so the edges here stay one page long.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .hashing import BlockHash, BlockKeys, chained, hash_block


class PrefixIndex(Protocol):
    name: str

    def match(self, tokens: Sequence[int], limit: int) -> list[int]:
        """The cached blocks holding the first full blocks of ``tokens``, in order, at most ``limit``."""

    def touch(self, blocks: Sequence[int]) -> None:
        """``blocks`` (a match) are being used now."""

    def insert(self, tokens: Sequence[int], table: Sequence[int]) -> int:
        """Offer ``table[i]``, which holds the keys and values of the i-th full block of ``tokens``; how many blocks
        became cached (a block whose tokens some other block already caches stays uncached)."""

    def holds(self, block: int) -> bool:
        """Whether ``block`` is cached (it may be in use or free)."""

    def victim(self, free: OrderedDict[int, None]) -> int:
        """The block to hand out next among ``free`` (blocks no request holds, oldest freed first; never empty)."""

    def forget(self, block: int) -> int:
        """``block`` is about to hold other data: it caches nothing from now on. How many blocks stopped being cached
        (more than one where the index cannot keep what hung below it)."""

    @property
    def cached_blocks(self) -> int:
        """Blocks that are cached, in use or free."""


class HashIndex:
    """vLLM's map from a full block's chained hash to the block that holds it."""

    name = "hash"

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.block_of: dict[BlockHash, int] = {}
        self.hash_of: dict[int, BlockHash] = {}

    def hash_next(self, parent: BlockHash, page: Sequence[int]) -> BlockHash:
        """A full block's hash from its parent's and its own tokens (the chain: hashing.hash_block)."""
        return hash_block(parent, page)

    def hashes(self, tokens: Sequence[int], count: int) -> list[BlockHash]:
        """The first ``count`` full blocks' hashes; those a request's ``BlockKeys`` kept are not computed again."""
        if isinstance(tokens, BlockKeys):
            return tokens.hashes(self.block_size, count, self.hash_next)
        return chained(tokens, self.block_size, count, self.hash_next)

    def match(self, tokens: Sequence[int], limit: int) -> list[int]:
        found = []
        for digest in self.hashes(tokens, limit):
            block = self.block_of.get(digest)
            if block is None:
                break  # the chain breaks at the first miss: what follows was computed after another prefix
            found.append(block)
        return found

    def touch(self, blocks: Sequence[int]) -> None:
        pass  # recency is the pool's free queue: a block in use is not in it, and goes to its back when freed

    def insert(self, tokens: Sequence[int], table: Sequence[int]) -> int:
        added = 0
        for digest, block in zip(self.hashes(tokens, len(table)), table):
            if digest in self.block_of or block in self.hash_of:
                continue  # cached already (a hit, or a block computed twice in one batch: the first one stays)
            self.block_of[digest], self.hash_of[block] = block, digest
            added += 1
        return added

    def holds(self, block: int) -> bool:
        return block in self.hash_of

    def victim(self, free: OrderedDict[int, None]) -> int:
        return next(iter(free))  # the least recently freed block, cached or not

    def forget(self, block: int) -> int:
        digest = self.hash_of.pop(block, None)
        if digest is None:
            return 0
        del self.block_of[digest]
        return 1  # its children keep their hashes: cached, but unreachable until evicted in turn

    @property
    def cached_blocks(self) -> int:
        return len(self.hash_of)


@dataclass(eq=False)
class Node:
    page: tuple[int, ...]  # the block's tokens: the edge from its parent
    block: int
    parent: Node | None
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)
    last_used: int = 0
    salt: str | None = None  # a root's: the cache_salt whose tree it starts (None: the unsalted tree's)


class RadixIndex:
    """SGLang's tree of cached token pages over the pool's blocks, least recently used leaf evicted first."""

    name = "radix"

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.root = Node((), -1, None)
        # NOTE: one tree per cache_salt (prefix.BlockKeys.salt), as the hash index starts each salt's chains from
        # its own root: a salted prompt finds only its own tenant's pages. A salt's root goes with its last page
        # (forget), so salts a client invents leave nothing behind.
        self.salted: dict[str, Node] = {}
        self.node_of: dict[int, Node] = {}
        self._clock = itertools.count(1)

    def _root(self, tokens: Sequence[int], create: bool = False) -> Node | None:
        salt = getattr(tokens, "salt", None)
        if salt is None:
            return self.root
        if create and salt not in self.salted:
            self.salted[salt] = Node((), -1, None, salt=salt)
        return self.salted.get(salt)

    def _pages(self, tokens: Sequence[int], count: int) -> list[tuple[int, ...]]:
        size = self.block_size
        return [tuple(tokens[i * size:(i + 1) * size]) for i in range(count)]

    def _path(self, tokens: Sequence[int], limit: int) -> list[Node]:
        node, path = self._root(tokens), []
        if node is None:
            return path
        for page in self._pages(tokens, min(limit, len(tokens) // self.block_size)):
            node = node.children.get(page)
            if node is None:
                break
            path.append(node)
        return path

    def match(self, tokens: Sequence[int], limit: int) -> list[int]:
        return [node.block for node in self._path(tokens, limit)]

    def matched_tokens(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of ``tokens`` the tree holds, counting a page matched only in part: what a tree
        of single tokens (SGLang's page size 1) would find, where this pool can reuse full blocks only."""
        path = self._path(tokens, len(tokens))
        node = path[-1] if path else self._root(tokens)
        if node is None:
            return 0
        done = len(path) * self.block_size
        rest = tokens[done:done + self.block_size]
        common = max((next((i for i, (a, b) in enumerate(zip(rest, page)) if a != b), min(len(rest), len(page)))
                      for page in node.children), default=0)
        return done + common

    def touch(self, blocks: Sequence[int]) -> None:
        now = next(self._clock)
        for block in blocks:
            node = self.node_of[block]
            node.last_used = now

    def insert(self, tokens: Sequence[int], table: Sequence[int]) -> int:
        pages = self._pages(tokens, min(len(tokens) // self.block_size, len(table)))
        if not pages:
            return 0  # nothing to cache (and no salt's tree started that would hold nothing)
        node, added, now = self._root(tokens, create=True), 0, next(self._clock)
        assert node is not None
        for page, block in zip(pages, table):
            child = node.children.get(page)
            if child is not None and child.block != block:
                # NOTE: the page was computed twice (two requests prefilled in one batch): the tree keeps the first
                # copy and stops here, so every node below a node is held by whoever holds that node's block, and a
                # free node never has a block in use below it (victim relies on it)
                break
            if child is None:
                if block in self.node_of:
                    break  # cannot happen in a consistent pool: one block holds one page; stop rather than alias
                child = Node(page, block, node)
                node.children[page] = self.node_of[block] = child
                added += 1
            child.last_used = now
            node = child
        return added

    def holds(self, block: int) -> bool:
        return block in self.node_of

    def victim(self, free: OrderedDict[int, None]) -> int:
        uncached = next((block for block in free if block not in self.node_of), None)
        if uncached is not None:
            return uncached
        leaves = [self.node_of[block] for block in free if not self.node_of[block].children]
        # Every cached free block has a free leaf below it (insert stops at a page computed twice, so nothing in use
        # hangs below a free node): there is always a leaf to take. Were there none, the least recently used free
        # block goes, and forget drops what hung below it from the index (never from the requests holding it).
        return min(leaves or [self.node_of[block] for block in free], key=lambda node: node.last_used).block

    def forget(self, block: int) -> int:
        node = self.node_of.get(block)
        if node is None:
            return 0
        parent = node.parent
        assert parent is not None
        del parent.children[node.page]
        if parent.salt is not None and not parent.children:
            del self.salted[parent.salt]  # the salt's last page: its tree goes with it
        stack, dropped = [node], 0
        while stack:  # the subtree below is unreachable without it: none of it is cached any more
            current = stack.pop()
            del self.node_of[current.block]
            dropped += 1
            stack.extend(current.children.values())
        return dropped

    @property
    def cached_blocks(self) -> int:
        return len(self.node_of)


INDEXES = {"hash": HashIndex, "radix": RadixIndex}
