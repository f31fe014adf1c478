"""Recorded engine data, read from the package (standard library only).

Two kinds of per-release records live in ``specdeploy/data/``:

- ``flags/<engine>-<version>.json``: the release's own argument parser (every flag, its
  choices and arity), its exported series and tuned-kernel file names. Written by
  ``e2e/flagdrift/run.sh`` from the installed engine. A release with a flag snapshot counts
  as *verified*.
- ``facts/<engine>-<version>.json``: what the release's code does with DFlash drafters
  (the +1 layer offset, native sliding windows, the compact draft cache, registered drafter
  architectures, which id lists each target class rejects, ...), computed by running the
  release's own functions on small inputs. Written by ``e2e/flagdrift/record-facts.sh``
  from the release's wheel.

The engine capability table (``engines.py``) cites both, and a test fails when a table row
and the recorded facts of a release in its range disagree.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from .memo import MiB, bounded
from .versions import parse_version

_NAME = re.compile(r"^(?P<engine>[a-z][a-z0-9_-]*?)-(?P<version>[0-9][A-Za-z0-9.+_-]*)\.json$")
FLAGS_PACKAGE = "specdeploy.data.flags"
FACTS_PACKAGE = "specdeploy.data.facts"


def normalize_version(version: str) -> str:
    version = str(version).strip()
    return version[1:] if version[:1] in ("v", "V") else version


@bounded("enginedata.listing", 16, 1 * MiB)
def _listing(package: str) -> tuple[tuple[str, str], ...]:
    out = []
    try:
        entries = list(resources.files(package).iterdir())
    except (ModuleNotFoundError, FileNotFoundError):
        return ()
    for entry in entries:
        m = _NAME.match(entry.name)
        if m and entry.is_file():
            out.append((m.group("engine"), m.group("version")))
    return tuple(sorted(out))  # cached: the package's data files do not change while running


@bounded("enginedata.read", 64, 8 * MiB)  # version: from specs
def _read(package: str, engine: str, version: str) -> str | None:
    try:
        ref = resources.files(package).joinpath(f"{engine}-{version}.json")
        if ref.is_file():
            return ref.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        pass
    return None


# ----------------------------------------------------------------- flag snapshots


def available_snapshots() -> list[tuple[str, str]]:
    """(engine, version) pairs that have a flag snapshot, sorted."""
    return list(_listing(FLAGS_PACKAGE))


def load_snapshot(engine: str, version: str) -> dict:
    """The recorded flag snapshot of one engine release (a fresh copy); LookupError when absent."""
    engine, version = str(engine).strip().lower(), normalize_version(version)
    text = _read(FLAGS_PACKAGE, engine, version)
    if text is None:
        known = ", ".join(f"{e} {v}" for e, v in available_snapshots()) or "none"
        raise LookupError(
            f"no flag snapshot for {engine} {version} (available: {known}); "
            f"run e2e/flagdrift/run.sh with that engine version to record one")
    return json.loads(text)


# ----------------------------------------------------------------- behaviour facts


def available_facts() -> list[tuple[str, str]]:
    """(engine, version) pairs with recorded behaviour facts, sorted by version."""
    return list(_facts_listing())


@bounded("enginedata.facts_listing", 1, 1 * MiB)
def _facts_listing() -> tuple[tuple[str, str], ...]:
    """``available_facts``, sorted once (the package's data files do not change while running)."""
    return tuple(sorted(_listing(FACTS_PACKAGE), key=lambda ev: (ev[0], parse_version(ev[1]) or (0, 0, 0))))


@bounded("enginedata.facts", 64, 4 * MiB)
def _facts(engine: str, version: str) -> dict | None:
    text = _read(FACTS_PACKAGE, engine, version)
    return None if text is None else json.loads(text)


def load_facts(engine: str, version: str) -> dict | None:
    """The facts recorded for exactly this release (``{"facts": {...}, ...}``), or None. Shared: do not mutate."""
    key = _facts_key(engine, str(version))
    return _facts(*key) if key is not None else None


@bounded("enginedata.facts_key", 256, 1 * MiB)  # bounded: engine and version come from specs
def _facts_key(engine: str, version: str) -> tuple[str, str] | None:
    """The recorded (engine, version) file ``load_facts`` reads for this release, or None."""
    v = parse_version(normalize_version(version))
    for e, rv in _facts_listing():
        if e == engine and parse_version(rv) == v:
            return e, rv
    return None


def nearest_facts(engine: str, version: str, since: str, until: str | None) -> tuple[str, dict] | None:
    """(recorded version, facts) for this release, else for the newest recorded release that is older than
    it and inside the same capability row [since, until); None when nothing in the row was recorded."""
    from .versions import in_range

    v = parse_version(normalize_version(version))
    if v is None:
        return None
    best: tuple[str, dict] | None = None
    for e, rv in _facts_listing():
        pv = parse_version(rv)
        if e != engine or pv is None or not in_range(pv, since, until) or pv > v:
            continue
        doc = _facts(e, rv)
        if doc is not None:
            best = (rv, doc)
    return best


def fact(doc: dict | None, *path: str, default=None):
    """A recorded value: ``fact(doc, "sliding_window", "native")`` walks ``doc["facts"]`` by key; a
    ``{"value": ..., "evidence": ...}`` record along the way stands for its value."""

    def unwrap(node):
        return node["value"] if isinstance(node, dict) and "value" in node and "evidence" in node else node

    if not doc:
        return default
    cur = doc.get("facts", {})
    for key in path:
        if isinstance(cur, dict) and key not in cur:
            cur = unwrap(cur)
        if not isinstance(cur, dict) or key not in cur:
            return default
        cur = cur[key]
    return unwrap(cur)
