"""What the checker hands back (pure): ``Analysis`` (findings and the derived settings), ``Derived`` (what
the renderer takes from the checked pair), and the collector every rule writes its findings to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..findings import PER_CODE_MAX, Finding, Severity, Source, clip_message, has_errors, limit_findings
from ..modelconfig import DrafterConfig, TargetConfig


@dataclass(frozen=True)
class Derived:
    """What the renderer takes from the checked pair; the check report shows it too."""

    block_size: int
    num_speculative_tokens: int
    draft_window: int | None  # compact draft cache window (SGLang flag), None: no flag
    drafter_window: int | None  # the drafter's trained sliding window
    layer_types: tuple[str, ...]
    has_sliding: bool
    mixed_layers: bool
    target_layer_ids: tuple[int, ...]
    engine_env: dict[str, str] = field(default_factory=dict)
    draft_attention_backend: str | None = None
    ddtree_budget: int | None = None
    ddtree_topk: int | None = None
    target_weight_bytes: float | None = None
    drafter_weight_bytes: float | None = None
    # the window the engine applies to the drafter's sliding layers by itself (no compact cache)
    native_window: int | None = None
    # the context the engine serves: spec.engine.maxModelLen, else the target's limit
    served_context: int | None = None
    max_model_len: int | None = None
    # step-wise methods (eagle3, eagle, draft_model, mtp): draft steps and top-k as rendered
    steps: int | None = None
    topk: int | None = None
    # ngram: prompt-lookup window as rendered (None: the engine's default)
    ngram_min: int | None = None
    ngram_max: int | None = None
    # the KV pool after the weights, capacity, largest context (core/memory.MemoryPlan; None: no GPU profile)
    memory: Any = None

    def to_dict(self) -> dict:
        return {
            "blockSize": self.block_size,
            "numSpeculativeTokens": self.num_speculative_tokens,
            "draftWindow": self.draft_window,
            "drafterWindow": self.drafter_window,
            "layerTypes": list(self.layer_types),
            "targetLayerIds": list(self.target_layer_ids),
            "engineEnv": dict(self.engine_env),
            "draftAttentionBackend": self.draft_attention_backend,
            "targetWeightGB": None if self.target_weight_bytes is None else round(self.target_weight_bytes / 1e9, 1),
            "drafterWeightGB": None if self.drafter_weight_bytes is None else round(self.drafter_weight_bytes / 1e9, 1),
            "nativeWindow": self.native_window,
            "servedContext": self.served_context,
            "maxModelLen": self.max_model_len,
            **({"steps": self.steps, "topk": self.topk} if self.steps is not None else {}),
            **({k: v for k, v in (("ngramMin", self.ngram_min), ("ngramMax", self.ngram_max)) if v is not None}),
            "memory": self.memory.to_dict() if self.memory is not None else None,
        }


@dataclass
class Analysis:
    findings: list[Finding]
    derived: Derived | None
    drafter: DrafterConfig | None = None
    target: TargetConfig | None = None
    # findings turned into info by spec.checks.accept (as they were before)
    accepted: list[Finding] = field(default_factory=list)
    # the options the check ran with (api/types.checker_options of the spec): the engine config records them
    options: Any = None  # an Options (checker/options.py imports this module)
    # the drafter's family and format (checker/family.py Family), None without a drafter or when unknown
    family: Any = None

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)


class Out:
    """Where the rules write their findings: past PER_CODE_MAX of one code only a count is kept (core/findings.py
    ``limit_findings`` reports it), so a document that repeats a mistake costs neither memory nor time per repeat."""

    def __init__(self) -> None:
        self.items: list[Finding] = []
        self.counts: dict[str, int] = {}
        self.dropped: dict[str, int] = {}

    def add(self, sev: Severity, code: str, src: Source, path: str, msg: str) -> None:
        n = self.counts.get(code, 0)
        self.counts[code] = n + 1
        if n >= PER_CODE_MAX:
            self.dropped[code] = self.dropped.get(code, 0) + 1
            return
        self.items.append(Finding(sev, code, src, path, clip_message(msg)))

    def limited(self) -> list[Finding]:
        """The items, at most PER_CODE_MAX of a code (those added directly too), and a count of the rest."""
        return limit_findings(self.items, self.dropped)

    def err(self, code: str, src: Source, path: str, msg: str) -> None:
        self.add(Severity.ERROR, code, src, path, msg)

    def warn(self, code: str, src: Source, path: str, msg: str) -> None:
        self.add(Severity.WARNING, code, src, path, msg)

    def info(self, code: str, src: Source, path: str, msg: str) -> None:
        self.add(Severity.INFO, code, src, path, msg)


S, D, T = Source.SPEC, Source.DRAFTER, Source.TARGET
