"""Findings: what the checker reports, in one shape for the CLI, webhook, operator and runtime."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Iterable, Mapping


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Source(str, Enum):
    """Which document a finding's path points into."""

    DRAFTER = "drafter"  # the drafter's config.json; path is JSONPath ($.dflash_config...)
    TARGET = "target"  # the target's config.json; path is JSONPath ($.text_config...)
    SPEC = "spec"  # the SpeculativeDeployment; path is a field path (spec.speculation...)


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # stable CamelCase code, e.g. TargetLayerOutOfRange
    source: Source
    path: str
    message: str  # says what is wrong and what to change

    def to_dict(self) -> dict:
        d = asdict(self)
        d["severity"] = self.severity.value
        d["source"] = self.source.value
        return d

    def one_line(self) -> str:
        return f"{self.severity.value}: {self.code} at {self.source.value} {self.path}: {self.message}"


def _field_pattern(names: Mapping[str, str]) -> re.Pattern:
    # longest first; a field followed by a deeper segment (spec.drafter.model for spec.drafter) is another field
    alts = "|".join(re.escape(k) for k in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w.])(?:{alts})(?![\w]|\.\w)")


def worded(findings: Iterable[Finding], names: Mapping[str, str], *, paths: bool = True) -> list[Finding]:
    """The findings as the user who wrote them meets them: every spec field that ``names`` maps (for example
    ``spec.speculation.method`` to ``--method`` for `specdeploy check`) named by what that user typed instead, in
    the message and (with ``paths``) the path. Admission and the status use the findings as they are (the spec's
    fields)."""
    if not names:
        return list(findings)
    pat = _field_pattern(names)
    def sub(text: str) -> str:
        text = pat.sub(lambda m: names[m.group(0)], text)
        return re.sub(r"(\S+) \(or \1\)", r"\1", text)  # "spec.checks.accept (or --accept)": said once

    return [replace(f, message=sub(f.message), path=sub(f.path) if paths else f.path) for f in findings]


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first; otherwise the order the checks ran in (stable)."""
    return sorted(findings, key=lambda f: _ORDER[f.severity])


def report(findings: Iterable[Finding]) -> dict:
    fs = sort_findings(findings)
    return {"ok": not has_errors(fs), "findings": [f.to_dict() for f in fs]}
