"""Fault injection: make matching requests fail, drop or expire watches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .common import JSON
from .resources import ResourceInfo

if TYPE_CHECKING:
    from .server import Emulator

# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

@dataclass
class Fault:
    """Make the next ``count`` matching requests fail.

    verb: get, list, watch, create, update, patch, delete, deletecollection or ``*``.
    resource: the plural (``configmaps``), optionally ``plural/subresource``, or ``*``.
    group/name/namespace: optional narrowing (None matches anything).
    status: the HTTP code to answer (409, 410, 422, 429, 500, 503, ...). On a watch, 410 opens the
    stream and sends one ``ERROR`` event with code 410 (Expired), as a real server does for a too
    old resourceVersion; other codes are answered as HTTP errors.
    action: ``"error"`` (default when status is set) or ``"drop"``: a watch is closed abruptly
    right after its initial events; any other request gets its connection closed, no response.
    agent: only requests whose User-Agent contains this text (e.g. one operator replica's
    identity): with ``verb="*"``, ``action="drop"`` and a large count, a network partition of
    that client from the API server.
    """

    verb: str = "*"
    resource: str = "*"
    group: str | None = None
    name: str | None = None
    namespace: str | None = None
    status: int | None = None
    action: str = "error"
    count: int = 1
    message: str | None = None
    agent: str | None = None
    fired: int = 0
    id: int = 0

    def matches(self, verb: str, info: ResourceInfo, sub: str | None, namespace: str | None,
                name: str | None, agent: str = "") -> bool:
        if self.count <= 0:
            return False
        if self.agent is not None and self.agent not in agent:
            return False
        if self.verb not in ("*", verb):
            return False
        if self.resource != "*":
            plural, _, want_sub = self.resource.partition("/")
            if plural != info.plural or (want_sub and want_sub != (sub or "")):
                return False
        if self.group is not None and self.group != info.group:
            return False
        if self.name is not None and self.name != name:
            return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        return True


class FaultInjector:
    """In-process control of faults; the HTTP API at ``/_specdeploy/...`` calls the same methods."""

    def __init__(self, emulator: "Emulator"):
        self._emulator = emulator
        self._faults: list[Fault] = []
        self._ids = 0
        self.fired: list[JSON] = []

    def add(self, verb: str = "*", resource: str = "*", *, name: str | None = None,
            namespace: str | None = None, group: str | None = None, status: int | None = None,
            action: str | None = None, count: int = 1, message: str | None = None,
            agent: str | None = None) -> Fault:
        action = action or "error"
        if action not in ("error", "drop"):
            raise ValueError(f"unknown fault action {action!r}")
        if action == "error" and status is None:
            raise ValueError("an error fault needs a status code")
        self._ids += 1
        fault = Fault(verb=verb.lower(), resource=resource, group=group, name=name,
                      namespace=namespace, status=status, action=action, count=int(count),
                      message=message, agent=agent or None, id=self._ids)
        self._faults.append(fault)
        return fault

    def clear(self, agent: str | None = None) -> None:
        """Remove every pending fault (or only those of one ``agent``: the partition heals)."""
        self._faults[:] = [] if agent is None else [f for f in self._faults if f.agent != agent]

    def pending(self) -> list[JSON]:
        return [vars(f).copy() for f in self._faults if f.count > 0]

    def take(self, verb: str, info: ResourceInfo, sub: str | None, namespace: str | None,
             name: str | None, agent: str = "") -> Fault | None:
        for fault in self._faults:
            if fault.matches(verb, info, sub, namespace, name, agent):
                fault.count -= 1
                fault.fired += 1
                self.fired.append({"id": fault.id, "verb": verb, "resource": info.plural,
                                   "name": name, "status": fault.status, "action": fault.action})
                del self.fired[:-1000]
                if fault.count <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def drop_watches(self, resource: str = "*", group: str | None = None) -> int:
        """Close the matching open watch streams abruptly (no final chunk)."""
        return self._emulator._signal_watchers(resource, group, "drop")

    def expire_watches(self, resource: str = "*", group: str | None = None) -> int:
        """Send ``ERROR 410 Expired`` to the matching open watches and end them."""
        return self._emulator._signal_watchers(resource, group, "expire")

