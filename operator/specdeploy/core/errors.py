"""The product's one error vocabulary: every exception class it defines says whether trying again can help.

- ``SpecdeployError``: the base. ``retryable`` (bool) and ``delay`` (seconds before the next try, or None: the
  caller's backoff decides) are class-level defaults; an instance may set its own (``ResolutionError`` and
  ``HubResolutionError`` do, per reason).
- ``Permanent``: the input is wrong (a spec, a flag, a document): the message names the field and the fix, and
  trying again without a change gives the same answer.
- ``Retryable``: not ready yet, or a dependency failed for now (the API server, the hub, a pod): try again later.

A class keeps its standard-library base beside these where callers catch it by that (``ValueError``,
``RuntimeError``): ``class CacheError(Permanent, ValueError)``. Read ``err.retryable``, never
``isinstance(err, Retryable)``: a per-instance answer wins over the class's.

Pure (core): no kopf here. The controller maps this vocabulary to kopf's ``TemporaryError`` / ``PermanentError``
in one place (controller/errors.py); tests/unit/test_errors.py keeps every exception class of the product on
this base.
"""

from __future__ import annotations

_UNSET = object()


class SpecdeployError(Exception):
    """An error of the product. ``retryable``/``delay``: see the module's docstring."""

    retryable: bool = False
    delay: float | None = None

    def __init_subclass__(cls, *, retryable: bool | None = None, delay: float | None | object = _UNSET, **kwargs):
        super().__init_subclass__(**kwargs)
        if retryable is not None:
            cls.retryable = retryable
        if delay is not _UNSET:
            cls.delay = delay  # type: ignore[assignment]


class Permanent(SpecdeployError, retryable=False, delay=None):
    """Wrong input: trying again without a change cannot help (the message says what to change)."""


class Retryable(SpecdeployError, retryable=True):
    """Not ready yet, or failed for now: try again after ``delay`` seconds (None: the caller's backoff)."""
