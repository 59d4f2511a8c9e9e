"""The scheduler's waiting queue, kept in the order its head is admitted: first come, first served, or, given a
prefix cache, the longest cached prefix first (SGLang's cache-aware "longest prefix match" schedule).

Each request gets a rank when it arrives, (-cached blocks, arrival number), and is inserted where its rank puts it
(``bisect.insort``): without a cache every rank's first part is 0 and a request joins the tail. NOTE: a waiting
prompt's cached prefix changes while it waits (a request ahead of it fills blocks it shares, the pool evicts blocks
it needs), so ``reorder``, at the start of each pass, looks every waiting prompt up again and moves only those whose
rank changed: the order is what sorting the queue by the cache as it is now would give, without sorting it. A
lookup hashes nothing twice (a request's ``keys`` keep their block hashes).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the caching pool holds tensors
    from .prefix import CachingPool
    from .request import Request

Rank = tuple[int, int]  # (-leading prompt blocks the cache holds, arrival number): the least is admitted first


class WaitingQueue:
    """Requests waiting for admission, the head first; ``cache``: rank them by their cached prefix (None: by arrival
    alone)."""

    def __init__(self, cache: CachingPool | None = None) -> None:
        self.cache = cache
        self._ordered: list[Request] = []  # ascending rank
        self._ranks: dict[Request, Rank] = {}
        self._arrivals = itertools.count()

    def _cached_blocks(self, request: Request) -> int:
        return 0 if self.cache is None else len(self.cache.match(request.keys))

    def add(self, request: Request) -> None:
        self._ranks[request] = (-self._cached_blocks(request), next(self._arrivals))
        bisect.insort(self._ordered, request, key=self._ranks.__getitem__)

    def reorder(self) -> None:
        """Move each request whose cached prefix changed since it was ranked to where its rank now puts it."""
        if self.cache is None:
            return  # arrival order never changes
        moved: dict[Request, Rank] = {}
        for request, (blocks, arrival) in self._ranks.items():
            now = -self._cached_blocks(request)
            if now != blocks:
                moved[request] = (now, arrival)
        if not moved:
            return
        # the others keep their order among themselves: take the moved out, then insert each at its new rank
        self._ordered = [request for request in self._ordered if request not in moved]
        self._ranks.update(moved)
        for request in moved:
            bisect.insort(self._ordered, request, key=self._ranks.__getitem__)

    @property
    def head(self) -> Request:
        return self._ordered[0]

    def remove(self, request: Request) -> None:
        self._ordered.remove(request)
        del self._ranks[request]

    def clear(self) -> None:
        self._ordered.clear()
        self._ranks.clear()

    def __len__(self) -> int:
        return len(self._ordered)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._ordered)

    def __contains__(self, request: object) -> bool:
        return request in self._ranks
