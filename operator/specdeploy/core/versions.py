"""Engine version strings: "0.5.23", "v0.33.0", "0.5.23.post1", "0.33.0rc1"."""

from __future__ import annotations

import re

from .memo import MiB, bounded

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?(post|rc|dev|a|b)?\.?(\d+)?)?$")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """Release tuple (major, minor, patch), or None when the string is not a version.

    Pre/post-release suffixes are accepted and ignored: capability rows are per release.
    """
    if not isinstance(text, str):
        return None
    return _parse(text)


@bounded("versions.parse", 4096, 2 * MiB)  # spec.engine.version has no length limit
def _parse(text: str) -> tuple[int, int, int] | None:
    """parse_version of a string (pure; cached: the capability table parses the same strings on every check)."""
    m = _VERSION.match(text.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def in_range(version: tuple[int, int, int], since: str, until: str | None) -> bool:
    lo = parse_version(since)
    assert lo is not None, since
    if version < lo:
        return False
    if until is None:
        return True
    hi = parse_version(until)
    assert hi is not None, until
    return version < hi
