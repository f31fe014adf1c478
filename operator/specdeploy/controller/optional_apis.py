"""The optional APIs the operator watches when a cluster serves them, and kopf's start-up line about them.

kopf logs a WARNING, "Unresolved resources cannot be served (try creating their CRDs): ...", for every watched
resource the cluster does not serve. Two of ours are optional: LeaderWorkerSet (only multi-node engines,
``spec.nodes > 1``) and prometheus-operator's PodMonitor (only engine scrape configs); a normal install without
them is not a problem. :class:`OptionalApisFilter` turns that line into one INFO line saying what each missing API
means, logged once per set of missing APIs; any other unresolved resource keeps kopf's WARNING.
"""

from __future__ import annotations

import logging
import re

KOPF_LOGGER = "kopf._core.reactor.observation"
PREFIX = "Unresolved resources cannot be served"
# (group, plural) -> what its absence means
OPTIONAL = {
    ("leaderworkerset.x-k8s.io", "leaderworkersets"):
        "LeaderWorkerSet (only multi-node engines, spec.nodes > 1, need it; such a deployment reports it missing "
        "until its CRD is installed)",
    ("monitoring.coreos.com", "podmonitors"):
        "prometheus-operator's PodMonitor (engines run without a PodMonitor: Prometheus does not scrape them "
        "until its CRD is installed)",
}
_SELECTOR = re.compile(r"Selector\(([^)]*)\)")
_FIELD = re.compile(r"(\w+)='([^']*)'")


def unresolved(message: str) -> list[tuple[str, str]] | None:
    """(group, plural) of each selector in kopf's unresolved-resources line; None for any other line."""
    if not message.startswith(PREFIX):
        return None
    out = []
    for m in _SELECTOR.finditer(message):
        f = dict(_FIELD.findall(m.group(1)))
        out.append((f.get("group", ""), f.get("any_name") or f.get("plural", "")))
    return out


def explain(missing: list[tuple[str, str]]) -> str:
    return ("optional APIs not served by this cluster, nothing to fix for a single-node install without "
            "prometheus-operator: " + "; ".join(OPTIONAL[m] for m in missing)
            + ". kopf starts watching them once their CRDs exist")


class OptionalApisFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._said: set[tuple[tuple[str, str], ...]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        missing = unresolved(record.getMessage())
        if not missing or not all(m in OPTIONAL for m in missing):
            return True  # not kopf's line, or a resource we need: kopf's WARNING as it is
        key = tuple(sorted(missing))
        if key in self._said:
            return False
        self._said.add(key)
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args = explain(sorted(missing)), ()
        return True


def install() -> OptionalApisFilter:
    f = OptionalApisFilter()
    logging.getLogger(KOPF_LOGGER).addFilter(f)
    return f
