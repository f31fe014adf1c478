"""No input leaves a SpeculativeDeployment without status: random specs and config documents go through
the reconciler against the embedded API server, and every CR ends with observedGeneration and the four
conditions (an unexpected error: Ready=False, reason InternalError).

Hypothesis drives SPECDEPLOY_STATUS_FUZZ_EXAMPLES examples (default 2000; the issue's floor).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdeploy.controller.kube import Kube, load_api_client
from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.core.policy import TenancyPolicy
from specdeploy.controller.resolve import Resolver
from specdeploy_dev.harness import Cluster

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "qwen3.6-27b-b300-vllm"
KIMI = ROOT / "examples" / "kimi-k2.6-rtx-pro-6000-sglang"
EXAMPLES = int(os.environ.get("SPECDEPLOY_STATUS_FUZZ_EXAMPLES", "2000"))
CONDITIONS = {"DrafterCompatible", "Progressing", "Ready", "Degraded"}
NS = "fuzz"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = Cluster(workdir=tmp_path_factory.mktemp("fuzz"), namespace=NS)
    c.start()
    try:
        c.apply_crds()
        kube = Kube(load_api_client(c.kubeconfig))
        # the Kimi example's remote code allowed, as an administrator would for it (policy.allowTrustRemoteCode)
        policy = TenancyPolicy(trust_remote_code_models=("moonshotai",))
        ctl = Controller(kube, Resolver(kube), Settings(workers=0, backoff_min=0.01, backoff_max=0.02, policy=policy))
        yield c, kube, ctl
    finally:
        c.stop()


# ----------------------------------------------------------------- strategies

WEIRD = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(-3, 70), max_size=8), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)
DRAFTER_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                "block_size", "layer_types", "sliding_window", "use_sliding_window", "max_window_layers", "hidden_act",
                "max_position_embeddings", "rope_scaling", "target_hidden_size", "eagle_aux_hidden_state_layer_ids",
                "model_type", "architectures", "dflash_config", "speculators_model_type", "transformer_layer_config"]
DC_KEYS = ["target_layer_ids", "mask_token_id", "block_size", "use_swa", "swa_window_size", "num_target_layers", "causal"]
TARGET_KEYS = ["num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads",
               "max_position_embeddings", "rope_scaling", "n_routed_experts", "n_shared_experts", "moe_intermediate_size",
               "quantization_config", "architectures", "layer_types", "model_max_length"]
SPEC_EDITS = [
    ("engine", "version"), ("engine", "name"), ("engine", "extraArgs"), ("engine", "maxModelLen"), ("engine", "image"),
    ("speculation", "blockSize"), ("speculation", "draftWindow"), ("speculation", "method"), ("speculation", "ddtree"),
    ("speculation", "draftAttentionBackend"), ("gpu", "count"), ("gpu", "type"), ("nodes",), ("replicas",),
    ("tuning", "enabled"), ("checks", "accept"), ("pod", "serviceAccountName"), ("target", "tokenSecretRef"),
    ("monitoring", "minAcceptanceLength"), ("monitoring", "regressionFraction"), ("monitoring", "baselineSettleSeconds"),
    ("monitoring", "baselineMinDrafts"),
]
SPEC_VALUES = st.one_of(WEIRD, st.sampled_from(["0.5.23", "0.33.0", "0.5.11", "0.21.0", "off", 2048, 16, 8, 0, -1, True,
                                                 ["--max-num-seqs", "4"], ["-n", "2"], ["$(HF_TOKEN)"], "ddtree",
                                                 ["TargetLayerIdsShifted"], ["HiddenSizeMismatch"], {"name": "x"},
                                                 "docker.io/attacker/x:1", "sglang", "vllm", "tgi", 65536, {"budget": 3}]))


def _deep(n: int) -> str:
    return "[" * n + "]" * n


@st.composite
def documents(draw, base: dict, keys: list[str], nested: str | None = None) -> str:
    """A config.json text: the base with random edits, or raw oddities."""
    kind = draw(st.sampled_from(["edit", "edit", "edit", "edit", "raw"]))
    if kind == "raw":
        return draw(st.sampled_from(["", "{", "null", "[]", "42", '"x"', "{\"a\": NaN}", _deep(5000),
                                     '{"num_hidden_layers": ' + "9" * 5000 + "}", json.dumps({"x": _deep(100)})]))
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["top", "nested"])) if nested else "top"
        key = draw(st.sampled_from(DC_KEYS if where == "nested" else keys))
        obj = doc.setdefault(nested, {}) if where == "nested" else doc
        if not isinstance(obj, dict):
            continue
        if draw(st.booleans()):
            obj.pop(key, None)
        else:
            obj[key] = draw(WEIRD)
    return json.dumps(doc, allow_nan=True)


@st.composite
def cases(draw):
    ex = draw(st.sampled_from([EX, KIMI]))
    drafter = json.loads((ex / "drafter.config.json").read_text())
    target = json.loads((ex / "target.config.json").read_text())
    cr = yaml.safe_load((ex / "speculativedeployment.yaml").read_text())
    spec = cr["spec"]
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(SPEC_EDITS))
        obj = spec
        for k in path[:-1]:
            obj = obj.setdefault(k, {}) if isinstance(obj.get(k, {}), dict) else {}
        obj[path[-1]] = draw(SPEC_VALUES)
    return spec, draw(documents(target, TARGET_KEYS, "text_config")), draw(documents(drafter, DRAFTER_KEYS, "dflash_config"))


# ----------------------------------------------------------------- the property

_names = itertools.count()


def _valid_cr(name: str, tcm: str, dcm: str) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"engine": {"name": "vllm", "version": "0.33.0"},
                     "target": {"model": "Qwen/Qwen3.6-27B", "configFrom": {"configMapKeyRef": {"name": tcm}}},
                     "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash", "configFrom": {"configMapKeyRef": {"name": dcm}}},
                     "gpu": {"type": "b300", "count": 1}}}


async def _one(kube: Kube, ctl: Controller, spec, target_text: str, drafter_text: str) -> dict:
    n = next(_names)
    name, tcm, dcm = f"fz{n}", f"fz{n}-t", f"fz{n}-d"
    for cm, text in ((tcm, target_text), (dcm, drafter_text)):
        await kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "namespace": NS},
                           "data": {"config.json": text}})
    stored = await kube.create(_valid_cr(name, tcm, dcm))
    # What the reconciler sees: the stored object's metadata with the fuzzed spec (a CR admitted under an
    # older schema or webhook, or written while neither ran), its ConfigMap references kept.
    body = copy.deepcopy(stored)
    fuzzed = copy.deepcopy(spec)
    if isinstance(fuzzed, dict):
        for role, cm in (("target", tcm), ("drafter", dcm)):
            if isinstance(fuzzed.get(role), dict):
                fuzzed[role]["configFrom"] = {"configMapKeyRef": {"name": cm}}
    body["spec"] = fuzzed
    key = (NS, name)
    ctl.bodies[key] = body
    await ctl.run_once(key)
    got = await kube.get("SpeculativeDeployment", NS, name)
    ctl.bodies.pop(key, None)
    ctl.state.pop(key, None)
    return got


def test_every_input_ends_with_status(env):
    c, kube, ctl = env
    seen_reasons: set[str] = set()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(cases())
    def prop(case):
        spec, target_text, drafter_text = case
        got = asyncio.run(_one(kube, ctl, spec, target_text, drafter_text))
        status = got.get("status") or {}
        assert status.get("observedGeneration") == got["metadata"]["generation"], (spec, status)
        types = {cond["type"] for cond in status.get("conditions") or []}
        assert CONDITIONS <= types, (spec, status)
        for cond in status["conditions"]:
            assert cond["reason"] and cond["status"] in ("True", "False", "Unknown")
        seen_reasons.update(cond["reason"] for cond in status["conditions"] if cond["type"] == "DrafterCompatible")

    prop()
    # the inputs reached every stage: refused specs, unreadable configs, check failures and passes (a
    # generator check; a short local run with a few examples need not reach them all)
    if EXAMPLES >= 1000:
        assert {"InvalidSpec", "ConfigInvalid", "PolicyRefused", "Compatible"} <= seen_reasons, seen_reasons
    print(f"status fuzz: {EXAMPLES} examples, DrafterCompatible reasons seen: {sorted(seen_reasons)}")


def test_the_issue_inputs_end_with_a_clear_status(env):
    c, kube, ctl = env
    drafter = (EX / "drafter.config.json").read_text()
    kimi_t = json.loads((KIMI / "target.config.json").read_text())
    kimi_t["text_config"]["n_shared_experts"] = "x"
    kimi_spec = yaml.safe_load((KIMI / "speculativedeployment.yaml").read_text())["spec"]
    kimi_spec["tuning"] = {"enabled": True}
    got = asyncio.run(_one(kube, ctl, kimi_spec, json.dumps(kimi_t), (KIMI / "drafter.config.json").read_text()))
    conds = {x["type"]: x for x in got["status"]["conditions"]}
    assert conds["DrafterCompatible"]["status"] == "True" and "TuningSkipped" in conds["DrafterCompatible"]["message"]

    spec = yaml.safe_load((EX / "speculativedeployment.yaml").read_text())["spec"]
    got = asyncio.run(_one(kube, ctl, spec, _deep(5000), drafter))
    conds = {x["type"]: x for x in got["status"]["conditions"]}
    assert conds["DrafterCompatible"]["reason"] == "ConfigInvalid"
    assert "nesting depth 5000 exceeds the limit of 64" in conds["DrafterCompatible"]["message"]


def test_an_unexpected_error_becomes_internal_error(env, monkeypatch):
    c, kube, ctl = env
    import specdeploy.controller.plan as rec  # the planner renders

    def boom(*a, **k):
        raise ZeroDivisionError("a bug in rendering")

    monkeypatch.setattr(rec, "render", boom)
    spec = yaml.safe_load((EX / "speculativedeployment.yaml").read_text())["spec"]
    got = asyncio.run(_one(kube, ctl, spec, (EX / "target.config.json").read_text(), (EX / "drafter.config.json").read_text()))
    conds = {x["type"]: x for x in got["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "InternalError"
    assert "ZeroDivisionError: a bug in rendering" in conds["Ready"]["message"]
    assert got["status"]["observedGeneration"] == got["metadata"]["generation"]
    events = asyncio.run(kube.list("Event", NS))
    assert any(e.get("reason") == "InternalError" and e["involvedObject"]["name"] == got["metadata"]["name"]
               for e in events)
