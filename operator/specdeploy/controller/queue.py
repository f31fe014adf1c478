"""A keyed work queue with delays: each key is processed by one worker at a time.

The controller-runtime model: events add keys, a key added while it is being processed is
processed again afterwards, failures come back after an exponential backoff, and a
periodic resync adds every key (idle resyncs must then make no API writes).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable, Hashable


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._due: dict[Hashable, float] = {}
        # (due, order, key) for every due time set in _due (stale entries, whose time _due no longer holds, are
        # dropped when they come up): the next key in O(log n), not a scan of every due key per get()
        self._heap: list[tuple[float, int, Hashable]] = []
        self._order = itertools.count()
        self._active: set[Hashable] = set()
        self._cond = asyncio.Condition()
        self._closed = False

    def __len__(self) -> int:
        return len(self._due)

    async def add(self, key: Hashable, delay: float = 0.0) -> None:
        due = self.clock() + max(0.0, delay)
        async with self._cond:
            if key not in self._due or due < self._due[key]:
                self._due[key] = due
                heapq.heappush(self._heap, (due, next(self._order), key))
            self._cond.notify_all()

    async def get(self) -> Hashable | None:
        """The next due key not being processed; None once closed."""
        async with self._cond:
            while True:
                if self._closed:
                    return None
                now = self.clock()
                nxt = self._next()
                if nxt is not None:
                    t, key = nxt
                    if t <= now:
                        del self._due[key]  # its heap entry is stale now
                        self._active.add(key)
                        return key
                    timeout = t - now
                else:
                    timeout = None
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout)
                except asyncio.TimeoutError:
                    pass

    def _next(self) -> tuple[float, Hashable] | None:
        """The earliest due key not being processed (None: none). Keys being processed are set aside and
        pushed back: at most one per worker."""
        heap, aside = self._heap, []
        try:
            while heap:
                t, _, key = heap[0]
                if self._due.get(key) != t:
                    heapq.heappop(heap)  # stale: the key was taken or its due time lowered since
                elif key in self._active:
                    aside.append(heapq.heappop(heap))
                else:
                    return t, key
            return None
        finally:
            for entry in aside:
                heapq.heappush(heap, entry)

    def active(self, key: Hashable) -> bool:
        """Whether a worker is processing ``key`` now."""
        return key in self._active

    async def done(self, key: Hashable) -> None:
        async with self._cond:
            self._active.discard(key)
            self._cond.notify_all()

    async def close(self) -> None:
        async with self._cond:
            self._closed = True
            self._cond.notify_all()


class Backoff:
    """Exponential backoff per key: min, 2*min, ... up to max; reset on success."""

    def __init__(self, minimum: float = 5.0, maximum: float = 300.0):
        self.minimum, self.maximum = minimum, maximum
        self._failures: dict[Hashable, int] = {}

    def failed(self, key: Hashable) -> float:
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        return min(self.maximum, self.minimum * (2 ** (n - 1)))

    def succeeded(self, key: Hashable) -> None:
        self._failures.pop(key, None)
