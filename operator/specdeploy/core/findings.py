"""Findings: what the checker reports, in one shape for the CLI, webhook, operator and runtime."""

from __future__ import annotations

import re
import sys
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


# A document can repeat one mistake without end (150000 out-of-range target_layer_ids in a 1 MiB config.json made
# 150000 findings, ~60 MiB, per check): the first few of a code are reported, then one finding counts the rest,
# and no message is longer than MESSAGE_MAX (a message may quote the document's values). docs/concepts/security.md
PER_CODE_MAX = 20
MESSAGE_MAX = 1024


def findings_bytes(findings: Iterable[Finding]) -> int:
    """What a collection of findings holds, estimated without walking it (memo sizes: core/memo.py): each finding's
    strings, its object and its slot in the collection (the severity, source and code strings are shared)."""
    return 64 + sum(sys.getsizeof(f.message) + sys.getsizeof(f.path) + 400 for f in findings)


def clip_message(message: str, limit: int = MESSAGE_MAX) -> str:
    return message if len(message) <= limit else message[: limit - 3].rstrip() + "..."


def limit_findings(findings: Iterable[Finding], dropped: dict[str, int] | None = None,
                   per_code: int = PER_CODE_MAX) -> list[Finding]:
    """At most ``per_code`` findings of each code, in order, each message clipped, then one finding per code that
    had more saying how many more (``dropped``: code -> findings already left out before this call)."""
    kept: list[Finding] = []
    seen: dict[str, int] = {}
    more: dict[str, int] = dict(dropped or {})
    last: dict[str, Finding] = {}
    for f in findings:
        n = seen.get(f.code, 0)
        if n >= per_code:
            more[f.code] = more.get(f.code, 0) + 1
            continue
        seen[f.code] = n + 1
        if len(f.message) > MESSAGE_MAX:
            f = Finding(f.severity, f.code, f.source, f.path, clip_message(f.message))
        kept.append(f)
        last[f.code] = f
    for code, n in more.items():
        if n and code in last:
            f = last[code]
            kept.append(Finding(f.severity, code, f.source, f.path,
                                f"and {n} more {code} finding{'s' if n != 1 else ''} like the ones above (the first "
                                f"{per_code} are listed); fix those and check again"))
    return kept
