"""The rollout series of the operator's registry (controller/metrics.py export_rollout, count_rollout_decision),
read back through prometheus_client's own collection and exposition."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specdeploy.controller import metrics as M
from specdeploy.core import names as N

NS, NAME = "llm", "qwen3-rollout-metrics"


def _samples(name: str, deployment: str = NAME) -> dict[tuple, float]:
    out = {}
    for fam in M.REGISTRY.collect():
        for s in fam.samples:
            if s.name == name and s.labels.get("deployment") == deployment:
                out[tuple(v for k, v in s.labels.items() if k not in ("namespace", "deployment"))] = s.value
    return out


def status(phase: str, analysis: list[dict] | None = None) -> dict:
    return {"phase": phase, "stableRevision": "3f2a000000000000", "canaryRevision": "9b1c000000000000",
            "analysis": analysis if analysis is not None else [
                {"track": "stable", "revision": "3f2a000000000000", "pods": 2, "drafts": 1843, "tau": 3.72,
                 "tokensPerSecondPerRequest": 11.2, "requests": 40, "failedRequests": 0, "errorRate": 0.0},
                {"track": "canary", "revision": "9b1c000000000000", "pods": 1, "drafts": 210, "tau": 1.45,
                 "tokensPerSecondPerRequest": 6.5, "requests": 12, "failedRequests": 1, "errorRate": 1 / 12}]}


def test_names_are_the_vocabulary():
    text = generate_latest(M.REGISTRY).decode()
    fams = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert fams[N.OP_ROLLOUT_DECISIONS.removesuffix("_total")] == "counter"
    assert fams[N.OP_ROLLOUT_PHASE] == "gauge" and fams[N.OP_ROLLOUT_ANALYSIS] == "gauge"


def test_phase_is_one_for_the_current_phase_only():
    try:
        M.export_rollout(NS, NAME, status("Analyzing"))
        phases = _samples(N.OP_ROLLOUT_PHASE)
        assert phases == {(p,): (1.0 if p == "Analyzing" else 0.0) for p in M.ROLLOUT_PHASES}
        M.export_rollout(NS, NAME, status("RolledBack", analysis=[]))
        phases = _samples(N.OP_ROLLOUT_PHASE)
        assert [p for (p,), v in phases.items() if v == 1] == ["RolledBack"]
        assert sum(phases.values()) == 1
    finally:
        M.export_rollout(NS, NAME, None)


def test_analysis_per_track_and_figure_and_stale_rows_go():
    try:
        M.export_rollout(NS, NAME, status("Analyzing"))
        got = _samples(N.OP_ROLLOUT_ANALYSIS)
        assert got == {("stable", "tau"): 3.72, ("stable", "tokens_per_second_per_request"): 11.2,
                       ("stable", "error_rate"): 0.0, ("stable", "drafts"): 1843.0,
                       ("canary", "tau"): 1.45, ("canary", "tokens_per_second_per_request"): 6.5,
                       ("canary", "error_rate"): 1 / 12, ("canary", "drafts"): 210.0}
        # the canary track gone, the stable one without a tau yet (no speculation measured): their series go
        M.export_rollout(NS, NAME, status("Stable", analysis=[
            {"track": "stable", "drafts": 0, "tau": None, "tokensPerSecondPerRequest": 10.0, "errorRate": 0.0}]))
        assert _samples(N.OP_ROLLOUT_ANALYSIS) == {("stable", "drafts"): 0.0,
                                                   ("stable", "tokens_per_second_per_request"): 10.0,
                                                   ("stable", "error_rate"): 0.0}
    finally:
        M.export_rollout(NS, NAME, None)


def test_decisions_count_and_start_at_zero():
    try:
        M.export_rollout(NS, NAME, status("Analyzing"))
        counts = _samples(N.OP_ROLLOUT_DECISIONS)
        assert counts[("rollback", "AcceptanceBelowStable")] == 0 and counts[("promote", "Promoted")] == 0
        assert len(counts) == sum(len(r) for r in M.ROLLOUT_REASONS.values())
        M.count_rollout_decision(NS, NAME, "Rollback", "AcceptanceBelowStable")
        M.count_rollout_decision(NS, NAME, "rollback", "AcceptanceBelowStable")
        M.count_rollout_decision(NS, NAME, "Promote", "Promoted")
        M.count_rollout_decision(NS, NAME, "Rollback", "SomethingNew")  # a reason the table does not know yet
        counts = _samples(N.OP_ROLLOUT_DECISIONS)
        assert counts[("rollback", "AcceptanceBelowStable")] == 2
        assert counts[("promote", "Promoted")] == 1 and counts[("rollback", "SomethingNew")] == 1
        assert counts[("rollback", "CanaryCrashing")] == 0
    finally:
        M.export_rollout(NS, NAME, None)


def test_none_removes_only_that_deployments_series():
    other = NAME + "-other"
    try:
        M.export_rollout(NS, NAME, status("Analyzing"))
        M.export_rollout(NS, other, status("Promoting"))
        M.count_rollout_decision(NS, NAME, "Rollback", "SomethingNew")
        M.export_rollout(NS, NAME, None)
        for series in (N.OP_ROLLOUT_PHASE, N.OP_ROLLOUT_ANALYSIS, N.OP_ROLLOUT_DECISIONS):
            assert _samples(series) == {}, series
            assert _samples(series, other), series
        assert f'deployment="{NAME}"' not in generate_latest(M.REGISTRY).decode()
        M.export_rollout(NS, NAME, None)  # twice, or never exported: no error
        M.export_rollout(NS, "never-exported", None)
    finally:
        M.export_rollout(NS, other, None)


def test_a_typed_status_reads_as_its_camel_case_dict():
    from pydantic import BaseModel, ConfigDict, Field

    class Row(BaseModel):  # the shape of api/types.py's models: snake_case fields, camelCase aliases
        model_config = ConfigDict(populate_by_name=True)
        track: str
        tau: float | None = None
        tokens_per_second_per_request: float | None = Field(None, alias="tokensPerSecondPerRequest")

    class Status(BaseModel):
        model_config = ConfigDict(populate_by_name=True)
        phase: str
        analysis: list[Row] = []

    try:
        M.export_rollout(NS, NAME, Status(phase="Analyzing", analysis=[
            Row(track="canary", tau=1.45, tokens_per_second_per_request=6.5)]))
        assert _samples(N.OP_ROLLOUT_ANALYSIS) == {("canary", "tau"): 1.45, ("canary", "tokens_per_second_per_request"): 6.5}
        assert _samples(N.OP_ROLLOUT_PHASE)[("Analyzing",)] == 1
    finally:
        M.export_rollout(NS, NAME, None)
