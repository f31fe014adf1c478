"""kopf's "Unresolved resources cannot be served" line: one INFO line with what it means for our optional APIs
(LeaderWorkerSet, PodMonitor), said once; kopf's WARNING for anything else."""

from __future__ import annotations

import logging

from kopf._cogs.structs.references import Selector

from specdeploy.controller import optional_apis as oa

LWS = Selector("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
PM = Selector("monitoring.coreos.com", "v1", "podmonitors")
OURS = Selector("specdeploy.io", "v1alpha1", "speculativedeployments")


def _line(*selectors: Selector) -> str:  # as kopf's observation._disable_mismatched_selectors writes it
    return "Unresolved resources cannot be served (try creating their CRDs): " + ", ".join(f"{s}" for s in selectors)


def test_optional_apis_are_one_info_line_said_once(caplog):
    log = logging.getLogger(oa.KOPF_LOGGER)
    f = oa.install()
    try:
        with caplog.at_level(logging.INFO, logger=oa.KOPF_LOGGER):
            log.warning(_line(LWS, PM))
            log.warning(_line(LWS, PM))  # the next scan: nothing new to say
            log.warning(_line(LWS, OURS))  # our own CRD missing: kopf's warning stays
        recs = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == oa.KOPF_LOGGER]
    finally:
        log.removeFilter(f)
    assert len(recs) == 2, recs
    assert recs[0][0] == "INFO" and "optional APIs not served" in recs[0][1]
    assert "LeaderWorkerSet" in recs[0][1] and "PodMonitor" in recs[0][1] and "Selector(" not in recs[0][1]
    assert recs[1][0] == "WARNING" and "speculativedeployments" in recs[1][1]


def test_the_line_is_parsed_from_kopfs_own_selector_text():
    assert oa.unresolved(_line(LWS, PM)) == [("leaderworkerset.x-k8s.io", "leaderworkersets"),
                                             ("monitoring.coreos.com", "podmonitors")]
    assert oa.unresolved("something else") is None
