"""Bounded caches, and results of pure functions over read-only documents remembered by identity (pure).

Every cache and memo of the operator is a ``BoundedLRU``: at most ``max_entries`` entries and at most
``max_bytes`` bytes (``approx_size`` of each entry's key and value, what the entry keeps alive), the least
recently used evicted first; an entry larger than the byte bound is not kept (the caller computes it every
time). ``bounded`` is ``functools.lru_cache`` with both bounds, for functions of hashable values.
``caches()`` lists them (docs/concepts/security.md, "Bounded memory").

The operator's resolver hands out one parsed config.json object per ConfigMap text and hub commit
(controller/resolve.py) and declares it ``read_only``, so every reconcile of an unchanged spec asks
the checker the same question with the same objects. ``by_identity`` remembers the last answers for
calls whose dict and list arguments are all declared read-only, matched by identity; every other argument
is matched by value (it must be hashable, else the call is not remembered), except objects declared
read-only themselves (the parsed views of a read-only document: ``modelconfig.parse_target``), matched by
identity too. A call with any other document (the CLI's, a test's that it edits between calls) runs as
before. ``copy`` gives each caller its own copy of a mutable result.

A read-only object is registered with a token that no other registration ever gets: a memo's key holds the
token, not the object, so the memo keeps no document alive, and an object registered after another one's
id was freed and reused never meets that one's answers. The registry itself is bounded like any cache: a
document it evicts is simply no longer recognised (and computed afresh).
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
import weakref
from collections import OrderedDict, namedtuple
from enum import Enum
from typing import Any, Callable, Hashable, Iterator, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

MiB = 1 << 20

# ----------------------------------------------------------------- sizes


_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None))
_SKIP = (type, Enum, type(len), type(lambda: 0), type(sys))  # shared: classes, enum members, functions, modules


def approx_size(obj: Any, _seen: set[int] | None = None) -> int:
    """The bytes ``obj`` keeps alive, estimated: ``sys.getsizeof`` of it and of everything it holds (containers,
    dataclasses, objects with ``__dict__`` or ``__slots__``), each object counted once; classes, functions,
    modules and enum members count nothing (shared). A read-only object counts its size as registered (computed
    once). Objects shared with other caches are counted in full: each cache's bound holds on its own."""
    seen: set[int] = set() if _seen is None else _seen
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen:
            continue
        seen.add(i)
        if isinstance(o, _ATOMS):
            total += sys.getsizeof(o)
            continue
        if isinstance(o, _SKIP):
            continue
        entry = _READ_ONLY.peek(i)
        if entry is not None and entry[0] is o and o is not obj:
            total += entry[2]
            continue
        total += sys.getsizeof(o, 64)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        else:
            d = getattr(o, "__dict__", None)
            if isinstance(d, dict):
                total += sys.getsizeof(d)
                stack.extend(d.values())
            for cls in type(o).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if isinstance(name, str) and name not in ("__dict__", "__weakref__"):
                        v = getattr(o, name, None)
                        if v is not None:
                            stack.append(v)
    return total


# ----------------------------------------------------------------- the bounded LRU


CacheInfo = namedtuple("CacheInfo", "hits misses maxsize currsize nbytes max_bytes")

_ALL: "weakref.WeakSet[BoundedLRU]" = weakref.WeakSet()


class BoundedLRU:
    """A thread-safe LRU map with an entry bound and a byte bound (``approx_size`` of key and value, unless ``put``
    is given the size). Evicts the least recently used entries until both bounds hold; an entry over the byte
    bound alone is not kept."""

    def __init__(self, name: str, max_entries: int, max_bytes: int, sizeof: Callable[[Any, Any], int] | None = None):
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"cache {name}: both bounds must be positive")
        self.name, self.max_entries, self.max_bytes = name, max_entries, max_bytes
        self._sizeof = sizeof or (lambda k, v: approx_size((k, v)))
        self._d: OrderedDict = OrderedDict()  # key -> (value, nbytes)
        self.nbytes = 0
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        _ALL.add(self)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value without touching the order or the counters."""
        hit = self._d.get(key)
        return default if hit is None else hit[0]

    def get(self, key: Hashable, default: Any = None) -> Any:
        # no lock: each dict operation is atomic, and a hit evicted meanwhile by another thread is still the answer
        hit = self._d.get(key)
        if hit is None:
            self.misses += 1
            return default
        try:
            self._d.move_to_end(key)
        except KeyError:
            pass
        self.hits += 1
        return hit[0]

    def put(self, key: Hashable, value: Any, nbytes: int | None = None) -> bool:
        """Keep ``value`` under ``key``; False when it alone is over the byte bound (then nothing is kept under
        ``key``)."""
        size = self._sizeof(key, value) if nbytes is None else nbytes
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if size > self.max_bytes:
                return False
            self._d[key] = (value, size)
            self.nbytes += size
            while len(self._d) > self.max_entries or self.nbytes > self.max_bytes:
                _, (_, n) = self._d.popitem(last=False)
                self.nbytes -= n
            return True

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            old = self._d.pop(key, None)
            if old is None:
                return default
            self.nbytes -= old[1]
            return old[0]

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.nbytes = 0

    def keys(self) -> list:
        return list(self._d)

    def values(self) -> list:
        return [v for v, _ in list(self._d.values())]

    def items(self) -> list:
        return [(k, v) for k, (v, _) in list(self._d.items())]

    def __iter__(self) -> Iterator:
        return iter(self.keys())

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, self.max_entries, len(self._d), self.nbytes, self.max_bytes)


def caches() -> list[BoundedLRU]:
    """Every live bounded cache, by name (the bench prints them; a test checks their bounds)."""
    return sorted(_ALL, key=lambda c: c.name)


def bounded(name: str, max_entries: int, max_bytes: int,
            sizeof: Callable[[Any, Any], int] | None = None) -> Callable[[F], F]:
    """``functools.lru_cache`` for a function of hashable arguments, with an entry and a byte bound. Exceptions are
    not remembered. ``fn.cache`` is the BoundedLRU; ``cache_info``/``cache_clear`` as lru_cache's. ``sizeof(args,
    result)``: the bytes an entry holds (default ``approx_size`` of both)."""

    def wrap(fn: F) -> F:
        cache = BoundedLRU(name, max_entries, max_bytes, sizeof)
        entries = cache._d

        @functools.wraps(fn)
        def remembered(*args: Any) -> Any:
            hit = entries.get(args)  # BoundedLRU.get inlined: some of these are asked tens of times per check
            if hit is not None:
                try:
                    entries.move_to_end(args)
                except KeyError:  # evicted meanwhile by another thread
                    pass
                cache.hits += 1
                return hit[0]
            cache.misses += 1
            result = fn(*args)
            cache.put(args, result)
            return result

        remembered.cache = cache  # type: ignore[attr-defined]
        remembered.cache_info = cache.info  # type: ignore[attr-defined]
        remembered.cache_clear = cache.clear  # type: ignore[attr-defined]
        return remembered  # type: ignore[return-value]

    return wrap


# ----------------------------------------------------------------- read-only documents


READ_ONLY_ENTRIES = 512
READ_ONLY_BYTES = 48 * MiB


_tokens = itertools.count(1)


class _Registry:
    """id -> (object, token, size): the registry holds each object (its id is not reused while here)."""

    def __init__(self, max_entries: int = READ_ONLY_ENTRIES, max_bytes: int = READ_ONLY_BYTES) -> None:
        self.lru = BoundedLRU("memo.read_only", max_entries, max_bytes, sizeof=lambda k, v: v[2])

    def peek(self, i: int) -> tuple | None:
        return self.lru.peek(i)

    def add(self, doc: Any, nbytes: int | None) -> None:
        entry = self.lru.peek(id(doc))
        if entry is not None and entry[0] is doc:
            self.lru.get(id(doc))  # most recently used
            return
        size = approx_size(doc) if nbytes is None else nbytes
        self.lru.put(id(doc), (doc, next(_tokens), size), size)


_READ_ONLY = _Registry()


def read_only(doc: Any, nbytes: int | None = None) -> Any:
    """Declare ``doc`` (a parsed document, or an object built from one, that nobody edits any more) read-only;
    returns it. ``nbytes``: its size when the caller knows it (else ``approx_size``, once)."""
    if doc is not None:
        _READ_ONLY.add(doc, nbytes)
    return doc


def is_read_only(doc: Any) -> bool:
    entry = _READ_ONLY.peek(id(doc))
    return entry is not None and entry[0] is doc


def size_of(obj: Any) -> int:
    """``approx_size``; for a registered read-only object, its registered size."""
    entry = _READ_ONLY.peek(id(obj))
    return entry[2] if entry is not None and entry[0] is obj else approx_size(obj)


def _token(a: Any) -> int | None:
    entry = _READ_ONLY.peek(id(a))
    return entry[1] if entry is not None and entry[0] is a else None


_BY_ID = object()  # marks an argument matched by identity in a memo key (no argument value can hold it)
BY_IDENTITY_BYTES = 2 * MiB  # small results (a family, a digest, an estimate); larger ones say theirs


def by_identity(size: int = 64, copy: Callable[[Any], Any] | None = None, max_bytes: int = BY_IDENTITY_BYTES,
                name: str | None = None, sizeof: Callable[[Any, Any], int] | None = None) -> Callable[[F], F]:
    """``sizeof(key, result)``: the bytes an entry holds (default ``approx_size`` of both)."""

    def wrap(fn: F) -> F:
        # key -> result; a key holds read-only arguments' tokens (never the objects) and the other arguments' values
        memo = BoundedLRU(name or f"{fn.__module__.removeprefix('specdeploy.')}.{fn.__qualname__}", size, max_bytes,
                          sizeof)
        missing = object()

        @functools.wraps(fn)
        def remembered(*args: Any) -> Any:
            parts = []
            for a in args:
                token = _token(a)
                if token is not None:
                    parts.append((_BY_ID, token))
                elif isinstance(a, (dict, list)):
                    return fn(*args)
                else:
                    parts.append(a)
            key = tuple(parts)
            try:
                hit = memo.get(key, missing)
            except TypeError:  # an unhashable argument: not remembered
                return fn(*args)
            if hit is not missing:
                return copy(hit) if copy is not None else hit
            result = fn(*args)
            memo.put(key, copy(result) if copy is not None else result)
            return result

        remembered.cache = memo  # type: ignore[attr-defined]
        remembered.cache_clear = memo.clear  # type: ignore[attr-defined]
        return remembered  # type: ignore[return-value]

    return wrap
