"""spec.rollout and status.rollout in the API: defaults, the webhook's messages (api/validation.py) and the CRD's
CEL rules (evaluated as the API server does, specdeploy_dev's crdschema), the ROLLOUT printer column."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specdeploy.api import crd
from specdeploy.api.types import RolloutStatus, SpeculativeDeploymentStatus
from specdeploy.api.validation import validate
from specdeploy_dev.apiserver import crdschema

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples" / "qwen3.6-27b-b300-vllm" / "speculativedeployment.yaml").read_text())
SCHEMA = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def body(rollout: dict | None, **spec) -> dict:
    doc = copy.deepcopy(EXAMPLE)
    if rollout is not None:
        doc["spec"]["rollout"] = rollout
    doc["spec"].update(spec)
    return doc


def lines(doc: dict) -> list[str]:
    return [p.line() for p in validate(doc)[1]]


def cel(doc: dict) -> list[str]:
    obj = copy.deepcopy(doc)
    crdschema.apply_defaults(obj, SCHEMA)
    return [c.text() for c in crdschema.validate(obj, SCHEMA, None, False)]


def test_defaults_are_the_contracts():
    cr, problems = validate(body({"strategy": "Canary"}))
    assert problems == []
    r = cr.spec.rollout
    assert (r.strategy, r.canary.replicas, r.analysis.window, r.analysis.min_drafts, r.deadline, r.on_failure) == \
        ("Canary", 1, "10m", 200, "30m", "Rollback")
    assert (r.analysis.min_acceptance_ratio, r.analysis.min_throughput_ratio, r.analysis.max_error_rate) == \
        (0.9, 0.9, 0.01)
    assert (r.analysis.probe.enabled, r.analysis.probe.max_tokens) == (True, 32)
    assert cr.spec.canary()
    cr, _ = validate(body(None))
    assert cr.spec.rollout is None and not cr.spec.canary()
    obj = body({"strategy": "Canary"})
    crdschema.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["rollout"]["deadline"] == "30m"  # nested objects get no default in the CRD (as elsewhere)
    assert cel(body({"strategy": "Canary", "deadline": "10m"})) != []  # an absent window counts as its default


REFUSED = [
    # (id, rollout, spec, webhook line, CEL message)
    ("deadline not after the window", {"strategy": "Canary", "deadline": "5m"}, {},
     "spec.rollout.deadline: spec.rollout.deadline is 5m, not longer than spec.rollout.analysis.window (10m): raise "
     "the deadline or shorten the window [FieldValueInvalid]",
     'spec.rollout.deadline: Invalid value: "object": deadline must be longer than analysis.window: raise deadline '
     "or shorten analysis.window"),
    ("deadline equal to the window", {"strategy": "Canary", "deadline": "1h", "analysis": {"window": "60m"}}, {},
     "spec.rollout.deadline: spec.rollout.deadline is 1h, not longer than spec.rollout.analysis.window (60m): raise "
     "the deadline or shorten the window [FieldValueInvalid]",
     'spec.rollout.deadline: Invalid value: "object": deadline must be longer than analysis.window: raise deadline '
     "or shorten analysis.window"),
    ("a window under 10s", {"strategy": "Canary", "analysis": {"window": "5s"}}, {},
     "spec.rollout.analysis.window: window is 5s but must be at least 10s [FieldValueInvalid]",
     'spec.rollout.analysis.window: Invalid value: "object": window must be at least 10s'),
    ("Canary with nodes > 1", {"strategy": "Canary"}, {"nodes": 2, "gpu": {"type": "b300", "count": 2}},
     "spec.rollout.strategy: Canary needs spec.nodes: 1 (multi-node canaries are not supported); use RollingUpdate "
     "[FieldValueInvalid]",
     'spec.rollout.strategy: Invalid value: "object": spec.rollout.strategy: Canary needs spec.nodes: 1 (multi-node '
     "canaries are not supported); use RollingUpdate"),
]


@pytest.mark.parametrize("rollout,spec,webhook,rule", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_by_the_webhook_and_by_cel(rollout, spec, webhook, rule):
    assert lines(body(rollout, **spec)) == [webhook]
    assert cel(body(rollout, **spec)) == [rule]


@pytest.mark.parametrize("rollout,spec", [
    ({"strategy": "RollingUpdate"}, {"nodes": 2, "gpu": {"type": "b300", "count": 2}}),  # multi-node rolls as today
    ({"strategy": "Canary", "deadline": "1h30m", "analysis": {"window": "1h"}}, {}),
    ({"strategy": "Canary", "canary": {"replicas": 3}, "analysis": {"window": "10s", "minDrafts": 0}}, {}),
])
def test_accepted(rollout, spec):
    assert lines(body(rollout, **spec)) == []
    assert cel(body(rollout, **spec)) == []


@pytest.mark.parametrize("rollout,path", [
    ({"strategy": "BlueGreen"}, "spec.rollout.strategy"),
    ({"strategy": "Canary", "canary": {"replicas": 0}}, "spec.rollout.canary.replicas"),
    ({"strategy": "Canary", "analysis": {"minAcceptanceRatio": 1.5}}, "spec.rollout.analysis.minAcceptanceRatio"),
    ({"strategy": "Canary", "analysis": {"window": "ten minutes"}}, "spec.rollout.analysis.window"),
    ({"strategy": "Canary", "onFailure": "Ignore"}, "spec.rollout.onFailure"),
    ({"strategy": "Canary", "analysis": {"probe": {"maxTokens": 1000}}}, "spec.rollout.analysis.probe.maxTokens"),
])
def test_schema_refusals_name_the_field(rollout, path):
    got = lines(body(rollout))
    assert got and got[0].startswith(path + ": "), got


def test_status_rollout_round_trips_and_the_printer_column():
    doc = {"phase": "RolledBack", "stableRevision": "a" * 16, "refusedRevision": "b" * 16,
           "decision": {"result": "Rollback", "reason": "AcceptanceBelowStable",
                        "message": "canary tau 1.45 vs stable 3.72: 0.39 < 0.90", "at": "2026-12-01T20:00:00Z"},
           "analysis": [{"track": "stable", "revision": "a" * 16, "pods": 2, "drafts": 1843, "tau": 3.72},
                        {"track": "canary", "revision": "b" * 16, "pods": 1, "drafts": 300, "tau": 1.45}],
           "probe": {"prompts": 4, "identical": 4, "message": ""}, "requestHandled": "retry@1"}
    assert RolloutStatus.model_validate(doc).model_dump(by_alias=True, exclude_none=True) == doc
    assert SpeculativeDeploymentStatus.model_validate({"rollout": doc}).rollout.phase == "RolledBack"
    assert {"name": "Rollout", "type": "string", "jsonPath": ".status.rollout.phase", "priority": 1} in \
        crd.PRINTER_COLUMNS
    assert "Rollout" in SCHEMA["properties"]["status"]["properties"]["conditions"]["description"]


def test_the_analysis_counts_stay_integers_through_the_status_model():
    """status.rollout as plan.py writes it (RolloutStatus.model_validate(...).model_dump): counts are integers, so
    `specdeploy rollout status -o json` prints 1843, not 1843.0."""
    import json

    from specdeploy.cli import rollout as RC
    from specdeploy.core.rollout import canary as ro

    rows = ro.analysis_table(ro.Totals(pods=2, drafts=1843.0, accepted_tokens=5000.0, requests=40.0, failed_requests=0.0),
                             ro.Totals(pods=1, drafts=210.0, accepted_tokens=300.0, requests=12.0, failed_requests=1.0))
    out = RolloutStatus.model_validate({"phase": "Analyzing", "analysis": rows}).model_dump(by_alias=True,
                                                                                            exclude_none=True)
    for row in out["analysis"]:
        for k in ("pods", "drafts", "requests", "failedRequests"):
            assert type(row[k]) is int, (k, row)
    # a status an older operator wrote (1843.0) prints as integers too
    old = {"status": {"rollout": {"analysis": [{"track": "stable", "drafts": 1843.0, "requests": 40.0, "tau": 3.5}]}}}
    text = json.dumps(RC.rollout_status(old))
    assert '"drafts": 1843,' in text and '"requests": 40,' in text and '"tau": 3.5' in text


def test_the_probe_line_says_its_count_once():
    from specdeploy.cli import rollout as RC

    obj = {"metadata": {"name": "roll", "namespace": "default"}, "spec": {"rollout": {"strategy": "Canary"}},
           "status": {"rollout": {"phase": "RolledBack", "probe": {
               "prompts": 4, "identical": 4, "message": "4/4 prompts identical at temperature 0 (32 tokens)"}}}}
    lines = [ln for ln in RC.format_status(obj).splitlines() if ln.startswith("Probe:")]
    assert lines == ["Probe:     4/4 prompts identical at temperature 0 (32 tokens)"], lines
