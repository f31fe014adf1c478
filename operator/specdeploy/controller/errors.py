"""The one place the product's error vocabulary (core/errors.py) meets kopf's.

``to_kopf``: a retryable ``SpecdeployError`` becomes ``kopf.TemporaryError`` with its delay (kopf's default
when it has none), a permanent one ``kopf.PermanentError``; the original is the new one's ``__cause__``.
``kopf_errors``: the decorator every kopf handler in handlers.py wears, so that no handler translates by itself.

What kopf does with it: the ``on.startup`` activity retries a TemporaryError after its delay and stops the
operator on a PermanentError (a wrong setting is not retried every minute); ``on.event`` handlers are never
retried by kopf (their log line says temporary or permanent). The reconciles themselves do not run inside
kopf: the controller's work queue retries them (reconciler.run_once, with its backoff).
"""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, TypeVar

import kopf

from ..core.errors import SpecdeployError

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def to_kopf(err: SpecdeployError) -> kopf.TemporaryError | kopf.PermanentError:
    """kopf's error for ``err``: TemporaryError(message, delay) when it is retryable, else PermanentError."""
    message = str(err) or type(err).__name__
    if err.retryable:
        if err.delay is None:
            return kopf.TemporaryError(message)  # kopf's own default delay
        return kopf.TemporaryError(message, delay=err.delay)
    return kopf.PermanentError(message)


def kopf_errors(fn: F) -> F:
    """A kopf handler whose ``SpecdeployError`` reaches kopf as its Temporary/PermanentError (``to_kopf``).

    Put it under the ``@kopf.on...`` decorator so kopf registers the wrapped handler; anything else is
    left as it is (kopf's default for an unexpected error)."""

    @functools.wraps(fn)
    async def handler(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except SpecdeployError as e:
            raise to_kopf(e) from e

    return handler  # type: ignore[return-value]
