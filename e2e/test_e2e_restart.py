"""Operator killed (SIGKILL) right after several CRs were applied, then started again."""

from __future__ import annotations

import json
import re

from e2e_support import (EMBEDDED, KIMI, QWEN, RESYNC, apply, child_names, clear_faults, configmap, example_cr,
                         example_doc, fired_faults, get, start_operator, wait_for, wait_reconciles, writes)

NAMES = {"r-qwen-a": QWEN, "r-qwen-b": QWEN, "r-kimi-a": KIMI, "r-kimi-b": KIMI}
PLURALS = {"configmap": "configmaps", "deployment": "deployments", "service": "services",
           "poddisruptionbudget": "poddisruptionbudgets"}
# log lines that are expected around a SIGKILL/restart
EXPECTED = re.compile(r"Unresolved resources cannot be served")


def test_kill_and_restart_converges(cluster):
    c = cluster
    apply(c, configmap("r-qwen-target", example_doc(QWEN, "target")),
          configmap("r-qwen-drafter", example_doc(QWEN, "drafter")),
          configmap("r-kimi-target", example_doc(KIMI, "target")),
          configmap("r-kimi-drafter", example_doc(KIMI, "drafter")))
    prefix = {QWEN: "r-qwen", KIMI: "r-kimi"}
    if EMBEDDED:
        # hold every CR mid-reconcile: its ConfigMap and Service created, the PodDisruptionBudget's create (a
        # POST) failing (then a 5 s backoff), the workload (created last) not yet, no status written yet
        c.fault(verb="create", resource="poddisruptionbudgets", status=503, count=10_000)
    apply(c, *[example_cr(ex, n, target_cm=f"{prefix[ex]}-target", drafter_cm=f"{prefix[ex]}-drafter")
               for n, ex in NAMES.items()])
    if EMBEDDED:
        wait_for(lambda: len([f for f in fired_faults(c) if f["resource"] == "poddisruptionbudgets"]) >= len(NAMES)
                 and all(get(c, "service", n) for n in NAMES), 30, "every CR to be stuck at its PodDisruptionBudget")
    else:  # a real cluster: kill as soon as the first child exists
        wait_for(lambda: c.get_json("configmaps", "-n", c.namespace, "-l", "app.kubernetes.io/managed-by=specdeploy"
                                    )["items"], 30, "the operator's first child", interval=0.05)
    c.stop_operator(kill=True)
    assert c.operator is None
    at_kill = {n: sorted(k for k, cn in child_names(n).items() if get(c, k, cn)) for n in NAMES}
    print(f"children present when the operator was killed: {at_kill}")
    if EMBEDDED:
        assert all(kinds == ["configmap", "service"] for kinds in at_kill.values()), at_kill
        assert all(not (get(c, "specdeploy", n).get("status") or {}).get("conditions") for n in NAMES)
    log_offset = c.operator_log.stat().st_size if c.operator_log.exists() else 0

    if EMBEDDED:
        clear_faults(c)
    start_operator(c)
    for name in NAMES:
        c.wait_condition(name, "DrafterCompatible", "True")
        c.wait_condition(name, "Progressing", "True")
    for name in NAMES:
        for kind, cname in child_names(name).items():
            wait_for(lambda: get(c, kind, cname), 30, f"{kind}/{cname}")
    # exactly one of each child per CR, each owned by its CR
    for kind in child_names("x"):
        items = c.get_json(PLURALS[kind], "-n", c.namespace, "-l", "app.kubernetes.io/managed-by=specdeploy")["items"]
        by_instance: dict[str, list[str]] = {}
        for o in items:
            by_instance.setdefault(o["metadata"]["labels"]["app.kubernetes.io/instance"], []).append(o["metadata"]["name"])
        assert by_instance == {n: [child_names(n)[kind]] for n in NAMES}, (kind, by_instance)
    for name in NAMES:
        cr = get(c, "specdeploy", name)
        assert cr["status"]["observedGeneration"] == cr["metadata"]["generation"]
        for kind, cname in child_names(name).items():
            refs = get(c, kind, cname)["metadata"]["ownerReferences"]
            assert [r["uid"] for r in refs] == [cr["metadata"]["uid"]]
    # quiet afterwards: a resync round over all CRs writes nothing
    before = writes(c)
    wait_reconciles(c, len(NAMES), timeout=3 * RESYNC + 20)
    assert writes(c) == before

    log = c.operator_log.read_text()[log_offset:]
    bad = [ln for ln in log.splitlines()
           if re.search(r"\b(ERROR|CRITICAL|Traceback)\b|reconcile .* failed", ln) and not EXPECTED.search(ln)]
    assert not bad, "unexpected errors in the operator log after the restart:\n" + "\n".join(bad[:20])
    errors = {k: v for k, v in (c.operator_metrics() or {}).items() if k.startswith("specdeploy_reconcile_errors_total")}
    assert sum(errors.values()) == 0, json.dumps(errors)
