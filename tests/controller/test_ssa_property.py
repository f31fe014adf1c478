"""Stateful property test of field ownership (issue 18): random sequences of spec edits and foreign
edits go through the reconciler on the embedded API server; after each convergence

- the fields specdeploy owns on every child (its Apply entry in managedFields) hold exactly the
  render of the latest spec: no stale field it applied before, no value someone else changed;
- fields other managers set and specdeploy does not apply survive (annotations; replicas set
  through the CR's scale subresource by an HPA-like manager while the user's spec leaves them);
- a further reconcile writes nothing.

SPECDEPLOY_SSA_PROPERTY_EXAMPLES examples (default 200, each up to 6 steps after the initial CR).
"""

from __future__ import annotations

import itertools
import json
import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.controller import ownership
from specdeploy.controller.kube import KINDS
from specdeploy.core.render import render

from ssa_support import CHILDREN, EX, Env

EXAMPLES = int(os.environ.get("SPECDEPLOY_SSA_PROPERTY_EXAMPLES", "200"))
TARGET = json.loads((EX / "target.config.json").read_text())
DRAFTER = json.loads((EX / "drafter.config.json").read_text())
_names = itertools.count()

LABELS = st.sampled_from(["team", "zone", "tier"])
VALUES = st.sampled_from(["a", "b", "c"])
VERSIONS = st.sampled_from(["0.33.0", "0.30.0", "0.27.0"])
REVISIONS = st.sampled_from([None, "main", "0123456789abcdef0123456789abcdef01234567"])
ARGS = st.lists(st.sampled_from([["--max-num-seqs", "8"], ["--max-num-seqs", "16"], ["--enable-prefix-caching"],
                                 ["--max-num-batched-tokens", "8192"]]), max_size=2, unique_by=lambda a: a[0])
CHILD = st.sampled_from(CHILDREN("x"))


def project(live, fields):
    """The part of ``live`` under a fieldsV1 tree (leaves take the whole value)."""
    if not isinstance(fields, dict) or not [k for k in fields if k != "."]:
        return live
    if isinstance(live, dict):
        return {k[2:]: project(live[k[2:]], v) for k, v in fields.items() if k.startswith("f:") and k[2:] in live}
    if isinstance(live, list):
        keys = [(json.loads(k[2:]), v) for k, v in fields.items() if k.startswith("k:")]
        values = {k[2:] for k in fields if k.startswith("v:")}
        out = []
        for item in live:
            for key, sub in keys:
                if isinstance(item, dict) and all(item.get(f) == v for f, v in key.items()):
                    out.append(project(item, sub))
                    break
            else:
                if json.dumps(item, separators=(",", ":")) in values:
                    out.append(item)
        return out
    return live


def _norm(obj):
    """Numbers as the API serves them are compared with the render's (ints stay ints)."""
    return json.loads(json.dumps(obj, sort_keys=True))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("ssaprop"), "ssaprop")
    yield e
    e.close()


def test_children_hold_exactly_the_latest_spec(env: Env):
    stats = {"steps": 0, "foreign_put_back": 0}

    class Ownership(RuleBasedStateMachine):
        @initialize()
        def create(self):
            self.name = f"p{next(_names)}"
            self.spec: dict = {}
            self.annotations: dict[tuple[str, str], dict[str, str]] = {}
            self.hpa_replicas: int | None = None
            self._edit()

        # ----------------------------------------------------------- the user's spec edits

        def _edit(self):
            env.put_cr(self.name, self.spec)
            env.converge(self.name)
            stats["steps"] += 1

        @rule(key=LABELS, value=VALUES)
        def add_node_selector(self, key, value):
            self.spec.setdefault("pod", {}).setdefault("nodeSelector", {})[key] = value
            self._edit()

        @rule(key=LABELS)
        def remove_node_selector(self, key):
            (self.spec.get("pod") or {}).get("nodeSelector", {}).pop(key, None)
            self._edit()

        @rule(key=LABELS)
        def toggle_toleration(self, key):
            tol = self.spec.setdefault("pod", {}).setdefault("tolerations", [])
            match = [t for t in tol if t["key"] == key]
            if match:
                tol.remove(match[0])
            else:
                tol.append({"key": key, "operator": "Exists"})
            self._edit()

        @rule(cpu=st.sampled_from([None, "2", "8"]), memory=st.sampled_from([None, "4Gi", "16Gi"]))
        def resources(self, cpu, memory):
            pod = self.spec.setdefault("pod", {})
            for k, v in (("cpu", cpu), ("memory", memory)):
                if v is None:
                    pod.pop(k, None)
                else:
                    pod[k] = v
            self._edit()

        @rule(args=ARGS)
        def extra_args(self, args):
            self.spec.setdefault("engine", {"name": "vllm", "version": "0.33.0"})["extraArgs"] = \
                [a for pair in args for a in pair]
            self._edit()

        @rule(version=VERSIONS)
        def engine_version(self, version):
            self.spec.setdefault("engine", {"name": "vllm"})["version"] = version
            self.spec["engine"].setdefault("name", "vllm")
            self._edit()

        @rule(revision=REVISIONS)
        def drafter_revision(self, revision):
            drafter = {"model": "z-lab/Qwen3.6-27B-DFlash", "configFrom": {"configMapKeyRef": {"name": "ssa-drafter"}}}
            if revision:
                drafter["revision"] = revision
            self.spec["drafter"] = drafter
            self._edit()

        @rule(replicas=st.sampled_from([None, 1, 2, 3]))
        def replicas(self, replicas):
            if replicas is None:
                self.spec.pop("replicas", None)
            else:
                self.spec["replicas"] = replicas
                self.hpa_replicas = None  # the user's apply (forced) takes replicas back
            self._edit()

        # ----------------------------------------------------------- other managers

        @rule(child=CHILD, value=VALUES)
        def foreign_annotation(self, child, value):
            kind, cname = child[0], child[1].replace("x", self.name, 1)
            env.foreign(kind, cname, {"metadata": {"annotations": {"example.com/note": value}}}, "someone")
            self.annotations[(kind, cname)] = {"example.com/note": value}
            env.converge(self.name)

        @rule(replicas=st.integers(1, 4))
        def hpa_scales_the_cr(self, replicas):
            if "replicas" in self.spec:
                return  # the user's spec sets replicas: an HPA is not in charge
            path = KINDS["SpeculativeDeployment"].path(env.ns, self.name, "scale")
            env.run(env.other.call("PATCH", path, body={"spec": {"replicas": replicas}},
                                   query=[("fieldManager", "hpa-like")],
                                   content_type="application/merge-patch+json"))
            self.hpa_replicas = replicas
            env.converge(self.name)

        @rule(image=st.sampled_from(["example.com/other:1", "example.com/other:2"]))
        def foreign_edit_of_an_owned_field(self, image):
            env.foreign("Deployment", self.name, {"spec": {"template": {"spec": {"containers": [
                {"name": "engine", "image": image}]}}}}, "kubectl-edit", how="strategic")
            env.converge(self.name)
            stats["foreign_put_back"] += 1

        # ----------------------------------------------------------- what must hold

        @invariant()
        def children_match_the_render(self):
            if not hasattr(self, "name"):
                return
            cr_body = env.get("SpeculativeDeployment", self.name)
            if self.hpa_replicas is not None:
                assert cr_body["spec"]["replicas"] == self.hpa_replicas
            cr = SpeculativeDeployment.model_validate(cr_body)
            cr.metadata.namespace = env.ns
            want = {(o["kind"], o["metadata"]["name"]): ownership.intent(o)[0]
                    for o in render(cr, TARGET, DRAFTER).objects}
            assert set(want) == set(CHILDREN(self.name))
            for (kind, cname), body in want.items():
                live = env.get(kind, cname)
                entry = ownership.own_entry(live)  # the Apply entry, or the create's until the first change
                assert entry is not None, (kind, cname)
                mine = project(live, entry["fieldsV1"])
                expect = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
                expect["metadata"] = {k: v for k, v in body["metadata"].items() if k not in ("name", "namespace")}
                assert _norm(mine) == _norm(expect), (kind, cname)
                for k, v in self.annotations.get((kind, cname), {}).items():
                    assert live["metadata"]["annotations"].get(k) == v, (kind, cname, k)
            assert env.reconcile(self.name) == [], "an idle reconcile wrote"

        def teardown(self):
            if hasattr(self, "name"):
                env.run(env.other.delete("SpeculativeDeployment", env.ns, self.name))
                env.ctl.bodies.pop((env.ns, self.name), None)
                env.ctl.state.pop((env.ns, self.name), None)

    Ownership.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=6, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    Ownership.TestCase().runTest()
    print(f"ssa property: {EXAMPLES} examples, {stats['steps']} spec edits, "
          f"{stats['foreign_put_back']} foreign edits of owned fields put back")
    assert stats["steps"] >= EXAMPLES
