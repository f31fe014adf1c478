"""Results of pure functions over read-only documents, remembered by the documents' identity (pure).

The operator's resolver hands out one parsed config.json object per ConfigMap text and hub commit
(controller/resolve.py) and declares it ``read_only``, so every reconcile of an unchanged spec asks
the checker the same question with the same objects. ``by_identity`` remembers the last answers for
calls whose dict and list arguments are all declared read-only, matched by identity (held, so an id
is never reused while remembered); every other argument is matched by value (it must be hashable,
else the call is not remembered), except objects declared read-only themselves (the parsed views of a
read-only document: ``modelconfig.parse_target``), matched by identity too. A call with any other
document (the CLI's, a test's that it edits between calls) runs as before. ``copy`` gives each caller
its own copy of a mutable result.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


_READ_ONLY: OrderedDict = OrderedDict()  # id -> the document (held: its id is not reused while here)
_READ_ONLY_SIZE = 512
_read_only_lock = threading.Lock()


def read_only(doc: Any) -> Any:
    """Declare ``doc`` (a parsed document, or an object built from one, that nobody edits any more) read-only;
    returns it."""
    if doc is not None:
        with _read_only_lock:
            _READ_ONLY[id(doc)] = doc
            _READ_ONLY.move_to_end(id(doc))
            while len(_READ_ONLY) > _READ_ONLY_SIZE:
                _READ_ONLY.popitem(last=False)
    return doc


def is_read_only(doc: Any) -> bool:
    return _READ_ONLY.get(id(doc)) is doc


_BY_ID = object()  # marks an argument matched by identity in a memo key (no argument value can hold it)


def by_identity(size: int = 64, copy: Callable[[Any], Any] | None = None) -> Callable[[F], F]:
    def wrap(fn: F) -> F:
        memo: OrderedDict = OrderedDict()  # key -> (args, result)
        lock = threading.Lock()

        @functools.wraps(fn)
        def remembered(*args: Any) -> Any:
            parts = []
            for a in args:
                if _READ_ONLY.get(id(a)) is a:
                    parts.append((_BY_ID, id(a)))
                elif isinstance(a, (dict, list)):
                    return fn(*args)
                else:
                    parts.append(a)
            key = tuple(parts)
            try:
                hit = memo.get(key)
            except TypeError:  # an unhashable argument: not remembered
                return fn(*args)
            # A hit's identity-matched arguments are the held ones: an id in a key is of an object the entry holds, so
            # no other live object has it (a value argument never compares equal to an identity part).
            if hit is not None:
                with lock:
                    if key in memo:
                        memo.move_to_end(key)
                return copy(hit[1]) if copy is not None else hit[1]
            result = fn(*args)
            with lock:
                memo[key] = (args, copy(result) if copy is not None else result)
                while len(memo) > size:
                    memo.popitem(last=False)
            return result

        remembered.cache_clear = memo.clear  # type: ignore[attr-defined]
        return remembered  # type: ignore[return-value]

    return wrap
