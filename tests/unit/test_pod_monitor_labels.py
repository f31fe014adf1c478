"""The operator-made PodMonitor carries the chart's podMonitor.labels (SPECDEPLOY_POD_MONITOR_LABELS), so a
kube-prometheus-stack podMonitorSelector (e.g. release=<its release>) selects it; the operator's own labels win."""

from __future__ import annotations

import pytest

from specdeploy.controller.settings import POD_MONITOR_LABELS_ENV, SettingsError, from_env
from test_render import do_render, make_cr


def _pod_monitor(r) -> dict:
    [pm] = [o for o in r.objects if o["kind"] == "PodMonitor"]
    return pm


def test_extra_labels_reach_the_pod_monitor():
    plain = _pod_monitor(do_render(make_cr(), pod_monitor=True))
    assert "release" not in plain["metadata"]["labels"]
    pm = _pod_monitor(do_render(make_cr(), pod_monitor=True, pod_monitor_labels={"release": "kube-prometheus-stack"}))
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # everything else is as before (the label set only adds)
    assert {k: v for k, v in pm["metadata"]["labels"].items() if k != "release"} == plain["metadata"]["labels"]


def test_extra_labels_never_replace_the_operators_own():
    pm = _pod_monitor(do_render(make_cr(), pod_monitor=True,
                                pod_monitor_labels={"app.kubernetes.io/managed-by": "someone-else", "team": "ml"}))
    assert pm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specdeploy"
    assert pm["metadata"]["labels"]["team"] == "ml"


def test_labels_from_the_environment():
    def pod_monitor_labels_from_env(env):
        return from_env(env).reconciler.pod_monitor_labels

    assert pod_monitor_labels_from_env({}) == {}
    assert pod_monitor_labels_from_env({POD_MONITOR_LABELS_ENV: '{"release": "kps"}'}) == {"release": "kps"}
    for bad in ('["release"]', '{"release": 1}', "release=kps"):
        with pytest.raises(SettingsError, match="podMonitor.labels"):
            pod_monitor_labels_from_env({POD_MONITOR_LABELS_ENV: bad})
