"""Issue 24, item 6: spec.engine.apiKey from a Secret (docs/concepts/security.md, "Engine network").

The key reaches the engine through its environment only: vLLM reads VLLM_API_KEY, SGLang gets
`--api-key $(SPECDEPLOY_ENGINE_API_KEY)`, which the kubelet fills from the container's environment. The pod spec
holds a Secret reference, never the key; the Secret is subject to the hub token Secrets' allow-list."""

from __future__ import annotations

import pydantic
import pytest

from test_render import container, do_render, make_cr, pod_template
from specdeploy.core.flagdrift import check_argv
from specdeploy.core.policy import TenancyPolicy, check_policy
from specdeploy.core.render import expand_kubelet_vars

KEY = {"apiKey": {"secretKeyRef": {"name": "engine-key", "key": "key"}}}
REF = {"secretKeyRef": {"name": "engine-key", "key": "key"}}


def keyed(engine: str, version: str, **spec):
    return make_cr(engine, version, engine={"name": engine, "version": version, **KEY}, **spec)


def env_of(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c["env"]}


def test_vllm_reads_the_key_from_its_environment_only():
    c = container(do_render(keyed("vllm", "0.33.0")))
    assert env_of(c)["VLLM_API_KEY"] == {"name": "VLLM_API_KEY", "valueFrom": REF}
    assert not any("api-key" in a or "API_KEY" in a for a in c["args"])
    assert check_argv("vllm", "0.33.0", c["args"]) == []


def test_sglang_gets_the_flag_filled_by_the_kubelet():
    c = container(do_render(keyed("sglang", "0.5.23")))
    assert env_of(c)["SPECDEPLOY_ENGINE_API_KEY"] == {"name": "SPECDEPLOY_ENGINE_API_KEY", "valueFrom": REF}
    assert c["args"][-2:] == ["--api-key", "$(SPECDEPLOY_ENGINE_API_KEY)"]
    env = {e["name"]: "the-key" if e["name"] == "SPECDEPLOY_ENGINE_API_KEY" else "x" for e in c["env"]}
    assert [expand_kubelet_vars(a, env) for a in c["args"]][-2:] == ["--api-key", "the-key"]
    assert check_argv("sglang", "0.5.23", c["args"]) == []


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_without_api_key_nothing_changes(engine, version):
    c = container(do_render(make_cr(engine, version)))
    assert not any(e["name"] in ("VLLM_API_KEY", "SPECDEPLOY_ENGINE_API_KEY") for e in c["env"])
    assert "--api-key" not in c["args"]


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_only_the_engine_container_serving_the_api_gets_the_key(engine, version):
    r = do_render(keyed(engine, version, gpu={"type": "b300", "count": 2}, nodes=2))
    [lws] = r.by_kind("LeaderWorkerSet")
    t = lws["spec"]["leaderWorkerTemplate"]
    leader, worker = t["leaderTemplate"]["spec"], t["workerTemplate"]["spec"]
    names = {"VLLM_API_KEY", "SPECDEPLOY_ENGINE_API_KEY"}
    assert names & {e["name"] for e in leader["containers"][0]["env"]}
    assert not names & {e["name"] for e in worker["containers"][0]["env"]}
    for spec in (leader, worker):  # the preflight never sees it
        for c in spec.get("initContainers", []):
            assert not names & {e["name"] for e in c.get("env", [])}


def test_user_args_still_reach_the_engine_escaped():
    cr = make_cr("sglang", "0.5.23", engine={"name": "sglang", "version": "0.5.23", **KEY,
                                             "extraArgs": ["--served-model-name", "$(SPECDEPLOY_ENGINE_API_KEY)"]})
    c = container(do_render(cr))
    env = {e["name"]: "the-key" for e in c["env"]}
    expanded = [expand_kubelet_vars(a, env) for a in c["args"]]
    assert "$(SPECDEPLOY_ENGINE_API_KEY)" in expanded  # the user's text, literally
    assert expanded.count("the-key") == 1 and expanded[-2:] == ["--api-key", "the-key"]


@pytest.mark.parametrize("arg", ["--api-key", "--api_key", "--api-key=x"])
def test_api_key_in_extra_args_conflicts_with_the_secret(arg):
    with pytest.raises(pydantic.ValidationError, match="spec.engine.apiKey"):
        make_cr("vllm", "0.33.0", engine={"name": "vllm", "version": "0.33.0", **KEY, "extraArgs": [arg, "x"]})


def test_the_secret_is_on_the_token_allow_list():
    spec = keyed("vllm", "0.33.0").spec
    refused = check_policy(spec, TenancyPolicy(token_secrets=("hf-token",)))  # an unlisted value
    assert [(f.code, f.path) for f in refused] == [("PolicyApiKeySecretNotAllowed",
                                                    "spec.engine.apiKey.secretKeyRef.name")]
    assert "hub.tokenSecrets" in refused[0].message and "--allowed-token-secret" in refused[0].message
    assert check_policy(spec, TenancyPolicy())
    assert check_policy(spec, TenancyPolicy(token_secrets=("engine-key",), api_key_secret_keys=("key",))) == []


def test_benchmark_client_sends_the_key_from_the_same_secret(monkeypatch):
    from specdeploy.core.bench.render import BenchOwner, build_client_job
    from specdeploy_runtime import benchclient

    owner = BenchOwner("sweep", "models", "0b6c7a52-5d0e-4a55-9f57-3c3c1c7d0a12")
    spec = keyed("vllm", "0.33.0").spec
    job = build_client_job(owner, "k3", "img", api_key=spec.engine.api_key)
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert env_of(c)["OPENAI_API_KEY"] == {"name": "OPENAI_API_KEY", "valueFrom": REF}
    [c] = build_client_job(owner, "k3", "img")["spec"]["template"]["spec"]["containers"]
    assert "OPENAI_API_KEY" not in env_of(c)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert "Authorization" not in benchclient._post_headers()
    monkeypatch.setenv("OPENAI_API_KEY", "the-key")
    assert benchclient._post_headers()["Authorization"] == "Bearer the-key"
