"""Property tests: the checker never raises on any JSON input, and every finding is well formed.

Inputs are arbitrary JSON-like values (with the field names the parsers read, so the typed
reads are exercised) and random mutations of the real pairs: keys deleted, values replaced
by random JSON, the target nested under a wrapper key.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit import PAIRS, pair
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.methods import needs_drafter
from specdeploy.core.checker import Options, analyze
from specdeploy.core.findings import Severity, Source
from specdeploy.core.render import RenderError, render

CODE = re.compile(r"^[A-Z][A-Za-z0-9]+$")
SEVERITIES = {"error", "warning", "info"}

# Field names the parsers read: random documents use them often so the typed reads run.
KNOWN_KEYS = [
    "architectures", "dflash_config", "target_layer_ids", "aux_hidden_state_layer_ids", "block_size",
    "mask_token_id", "num_target_layers", "hidden_size", "target_hidden_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
    "draft_vocab_size", "hidden_act", "layer_types", "sliding_window", "use_swa", "swa_window_size", "causal",
    "is_causal", "use_sliding_window", "max_window_layers", "dtype", "torch_dtype", "speculators_model_type",
    "transformer_layer_config", "text_config", "language_config", "llm_config", "thinker_config",
    "quantization_config", "compression_config", "tie_word_embeddings", "auto_map", "model_type",
    "n_routed_experts", "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "kv_lora_rank",
    "q_lora_rank", "mlp_only_layers", "config_groups", "ignore", "num_bits", "group_size", "quant_method",
]
KNOWN_STRINGS = ["sliding_attention", "full_attention", "linear_attention", "dflash", "DFlashDraftModel",
                 "DFlash2DraftModel", "silu", "gelu", "bfloat16", "float8_e4m3fn", "fp8", "re:.*self_attn.*", ""]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-2, max_value=70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(KNOWN_STRINGS)
)
keys = st.sampled_from(KNOWN_KEYS) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
    max_leaves=30,
)
json_objects = st.dictionaries(keys, json_values, max_size=10)

pair_names = st.sampled_from(sorted(PAIRS))
options = st.builds(
    Options,
    engine=st.sampled_from([None, "sglang", "vllm", "tgi"]),
    engine_version=st.sampled_from([None, "0.5.10", "0.5.23", "0.25.0", "0.33.0", "1.0", "x"]),
    method=st.sampled_from(["dflash", "ddtree", "eagle", "eagle3", "mtp", "ngram", "dspark", "medusa"]),
    gpu=st.sampled_from([None, "rtx-pro-6000", "b300", "b200", "h100", "nope"]),
    gpu_count=st.integers(min_value=-1, max_value=16),
    nodes=st.integers(min_value=0, max_value=3),
    block_size=st.none() | st.integers(min_value=-1, max_value=80),
    draft_window=st.none() | st.integers(min_value=-1, max_value=5000) | st.sampled_from(["off", "auto"]),
    draft_attention_backend=st.sampled_from([None, "fa4", "fa3", "trtllm_mha", "flashinfer", "triton"]),
    extra_args=st.lists(st.sampled_from(["--tp", "4", "--mem-fraction-static", "0.8", "--config=x", "-1", "a\nb", ""]),
                        max_size=4).map(tuple),
    ddtree_budget=st.none() | st.integers(min_value=-1, max_value=32),
    ddtree_topk=st.none() | st.integers(min_value=-1, max_value=8),
    ddtree_set=st.booleans(),
    trust_remote_code=st.booleans(),
    target_model=st.none() | st.text(max_size=20),
    drafter_model=st.none() | st.text(max_size=20),
)

PROPS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_well_formed(findings) -> None:
    for f in findings:
        assert isinstance(f.code, str) and CODE.match(f.code), f
        assert isinstance(f.severity, Severity) and f.severity.value in SEVERITIES, f
        assert isinstance(f.source, Source) and f.source.value in {"drafter", "target", "spec"}, f
        assert isinstance(f.path, str) and (f.path.startswith("$") or f.path.startswith("spec.")), f
        if f.source is Source.SPEC:
            assert f.path.startswith("spec."), f
        else:
            assert f.path.startswith("$"), f
        assert isinstance(f.message, str) and f.message, f
        d = f.to_dict()
        assert set(d) >= {"severity", "code", "source", "path", "message"}


# ----------------------------------------------------------------- mutations of the real pairs


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(prefix + (i,))
            out += _paths(v, prefix + (i,))
    return out


EXTREMES = [0, -1, 1, 3, 2**31, 2**63, 2**64, 10**30, 10**400, 1e308, 0.5, -0.0,
            float("inf"), float("-inf"), float("nan")]


def _numeric_paths(doc: Any) -> list[tuple]:
    out = []
    for path in _paths(doc):
        v = doc
        for k in path:
            v = v[k]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(path)
    return out


def _mutate(data, doc: Any, n: int) -> Any:
    for _ in range(n):
        op = data.draw(st.sampled_from(["delete", "replace", "replace", "extreme", "extreme", "wrap", "whole"]))
        paths = _numeric_paths(doc) if op == "extreme" else _paths(doc)
        if op == "whole" or not paths:
            if data.draw(st.integers(0, 9)) == 0:
                doc = data.draw(json_values)
            continue
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = data.draw(json_values)
        elif op == "extreme":  # numbers past every real config: int64, float range, inf, nan
            parent[key] = data.draw(st.sampled_from(EXTREMES))
        else:  # nest the value one level deeper, as wrappers do
            parent[key] = {data.draw(st.sampled_from(["text_config", "dflash_config", "llm_config"])): parent[key]}
    return doc


@PROPS
@given(data=st.data(), name=pair_names, n_drafter=st.integers(0, 4), n_target=st.integers(0, 4), opts=options)
def test_mutated_pairs_never_raise(data, name, n_drafter, n_target, opts):
    d, t = pair(name)
    d = _mutate(data, d, n_drafter)
    t = _mutate(data, t, n_target)
    if data.draw(st.booleans()):
        t = {data.draw(st.sampled_from(["text_config", "language_config", "llm_config"])): t}
    a = analyze(d, t, opts)
    assert_well_formed(a.findings)
    assert a.ok == (not any(f.severity is Severity.ERROR for f in a.findings))
    if a.derived is not None:
        assert isinstance(a.derived.to_dict(), dict)


@PROPS
@given(drafter=json_values, target=json_values, opts=options)
def test_arbitrary_json_never_raises(drafter, target, opts):
    a = analyze(drafter, target, opts)
    assert_well_formed(a.findings)
    codes = [(f.source.value, f.code, f.path) for f in a.findings]
    if not isinstance(drafter, dict) and needs_drafter(opts.method):
        assert ("drafter", "ConfigNotAnObject", "$") in codes
        assert a.derived is None and not a.ok
    if not isinstance(target, dict):
        assert ("target", "ConfigNotAnObject", "$") in codes
        assert not a.ok


@PROPS
@given(drafter=json_objects, target=json_objects)
def test_arbitrary_objects_never_raise(drafter, target):
    a = analyze(drafter, target, Options(engine="sglang", engine_version="0.5.23", gpu="b300", gpu_count=2))
    assert_well_formed(a.findings)
    assert "ConfigNotAnObject" not in {f.code for f in a.findings}
    assert a.derived is not None  # any object parses into a drafter view


@pytest.mark.parametrize("bad", [None, [], [1, 2], "config", 3, 2.5, True])
@pytest.mark.parametrize("which", ["drafter", "target"])
def test_non_dict_gives_config_not_an_object(bad, which):
    d, t = pair("qwen3-8b")
    if which == "drafter":
        d = bad
    else:
        t = bad
    a = analyze(d, t, Options())
    hits = [f for f in a.findings if f.code == "ConfigNotAnObject"]
    assert [(f.source.value, f.path, f.severity.value) for f in hits] == [(which, "$", "error")]


@PROPS
@given(data=st.data(), name=pair_names)
def test_mutated_pair_findings_are_deterministic(data, name):
    d, t = pair(name)
    d = _mutate(data, d, 2)
    before = copy.deepcopy(d), copy.deepcopy(t)
    a1 = analyze(d, t, Options(engine="vllm", engine_version="0.33.0"))
    a2 = analyze(d, t, Options(engine="vllm", engine_version="0.33.0"))
    assert a1.findings == a2.findings
    # analyze never mutates its inputs (deepcopy keeps float objects, so NaN compares by identity)
    assert (d, t) == before


# ----------------------------------------------------------------- render: objects or RenderError, nothing else


def _cr(engine: str, version: str, gpu: str, count: int, nodes: int) -> SpeculativeDeployment:
    return SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "prop", "namespace": "ns"},
        "spec": {
            "engine": {"name": engine, "version": version},
            "target": {"model": "org/target"},
            "drafter": {"model": "org/drafter"},
            "gpu": {"type": gpu, "count": count},
            "nodes": nodes,
        },
    })


@PROPS
@given(data=st.data(), name=pair_names, n_drafter=st.integers(0, 3), n_target=st.integers(0, 3),
       engine=st.sampled_from([("sglang", "0.5.23"), ("vllm", "0.33.0"), ("sglang", "0.5.10"), ("vllm", "0.25.0")]),
       gpu=st.sampled_from(["b300", "rtx-pro-6000", "h100"]), count=st.sampled_from([1, 2, 8]),
       nodes=st.sampled_from([1, 2]))
def test_render_returns_objects_or_raises_render_error(data, name, n_drafter, n_target, engine, gpu, count, nodes):
    d, t = pair(name)
    d = _mutate(data, d, n_drafter)
    t = _mutate(data, t, n_target)
    cr = _cr(*engine, gpu, count, nodes)
    try:
        r = render(cr, t, d)
    except RenderError as e:
        assert e.findings and any(f.severity is Severity.ERROR for f in e.findings)
        assert_well_formed(e.findings)
        return
    assert r.analysis.ok
    assert r.objects and all(isinstance(o, dict) and o.get("kind") and o.get("apiVersion") for o in r.objects)
    for o in r.objects:
        if o["kind"] in ("Deployment", "LeaderWorkerSet"):
            tmpl = o["spec"]["template"] if o["kind"] == "Deployment" else o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
            c = tmpl["spec"]["containers"][0]
            assert all(isinstance(x, str) for x in c["command"] + c["args"])


@PROPS
@given(drafter=json_values, target=json_values)
def test_render_arbitrary_json_objects_or_render_error(drafter, target):
    try:
        r = render(_cr("sglang", "0.5.23", "b300", 1, 1), target, drafter)
    except RenderError as e:
        assert any(f.severity is Severity.ERROR for f in e.findings)
    else:
        assert r.objects
