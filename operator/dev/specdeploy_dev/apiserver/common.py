"""Errors and small helpers shared by the embedded API server's modules."""

from __future__ import annotations

import datetime
import json
import re
import time
from typing import Any


JSON = dict[str, Any]
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SERVER_VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-specdeploy-standin",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
    "platform": "linux/amd64",
}
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FIELDS_IMMUTABLE = ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp",
                     "deletionGracePeriodSeconds", "generation", "resourceVersion")


# --------------------------------------------------------------------------------------------
# Errors and small helpers
# --------------------------------------------------------------------------------------------

class ApiError(Exception):
    """An error answered as a Kubernetes ``Status`` object."""

    REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
               406: "NotAcceptable", 409: "Conflict", 413: "RequestEntityTooLarge", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
               429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
               504: "Timeout"}

    def __init__(self, code: int, message: str, reason: str | None = None, details: JSON | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> JSON:
        body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _clone(obj: Any) -> Any:
    # Objects are JSON-only; a JSON round trip is a faster deep copy than copy.deepcopy.
    return json.loads(json.dumps(obj))


_CLOCK: list[Any] = [None, ""]  # (the second last formatted, its RFC 3339 text)


def _now() -> str:
    """The current time as the server writes timestamps (whole seconds, UTC); formatted once a second."""
    second = int(time.time())
    if second != _CLOCK[0]:
        _CLOCK[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))]
    return _CLOCK[1]


def _human_age(timestamp: str | None) -> str:
    """Like k8s.io/apimachinery duration.HumanDuration, as the server renders Age cells."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        return str(timestamp)
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    if seconds < 0:
        seconds = 0
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        h = hours % 24
        return f"{days}d{h}h" if h else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}

