"""The canary probe (controller/probe.py): greedy prompts to a stable and a canary pod, served by
engine stand-ins on loopback (real HTTP), and what the probe reads of rendered pods and raw specs."""

from __future__ import annotations

import asyncio

import pytest

from specdeploy.controller import probe as pr
from specdeploy.controller.pods import http_port
from specdeploy.core.rollout.canary import Probe
from specdeploy_dev.engine_standin import EngineStandin

MODEL = "Qwen/Qwen3-8B"


def run(coro):
    return asyncio.run(coro)


def pod(name: str, port: int, *, args=None, engine="vllm", ip="127.0.0.1") -> dict:
    command = ["vllm", "serve"] if engine == "vllm" else ["python3", "-m", "sglang.launch_server"]
    if args is None:
        args = [MODEL, "--port", str(port)] if engine == "vllm" else ["--model-path", MODEL, "--port", str(port)]
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "labels": {"specdeploy.io/engine": engine}},
            "spec": {"containers": [{"name": "engine", "command": command, "args": args,
                                     "ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"podIP": ip, "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def standin(**attrs) -> EngineStandin:
    s = EngineStandin("vllm", "healthy", model_name=MODEL)
    s.sleep_scale = 0
    for k, v in attrs.items():
        setattr(s, k, v)
    return s.start()


@pytest.fixture(scope="module")
def _servers():
    a, b = standin(), standin()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def pair(_servers):
    for s in _servers:
        s.output_salt = ""
    return _servers


def test_prompts_are_four_short_fixed_prompts():
    ps = pr.prompts()
    assert len(ps) == 4 and len(set(ps)) == 4
    assert all(isinstance(p, str) and 10 < len(p) < 200 for p in ps)


def test_identical_outputs(pair):
    a, b = pair
    p = run(pr.probe(pod("s", a.port), pod("c", b.port), port_of=http_port, max_tokens=8))
    assert p == Probe(prompts=4, identical=4, errors=0, message=p.message)
    assert p.message.startswith("4/4 prompts identical at temperature 0 (8 tokens)")


def test_outputs_that_differ_are_counted_and_quoted(pair):
    a, b = pair
    b.output_salt = "another drafter"
    p = run(pr.probe(pod("s", a.port), pod("c", b.port), port_of=http_port, max_tokens=8))
    assert (p.prompts, p.identical, p.errors) == (4, 0, 0)
    assert "4 differ; prompt 1: stable \"" in p.message and "vs canary \"" in p.message


def test_one_prompt_that_differs(pair, monkeypatch):
    """Only the prompts whose completions differ count against the canary."""
    a, b = pair
    ps = pr.prompts()
    orig = b.serve_post

    def serve_post(path, body):  # the canary's answer to the third prompt only is different
        import json
        if json.loads(body).get("prompt") == ps[2]:
            b.output_salt = "x"
        try:
            return orig(path, body)
        finally:
            b.output_salt = ""

    monkeypatch.setattr(b, "serve_post", serve_post)
    p = run(pr.probe(pod("s", a.port), pod("c", b.port), port_of=http_port, max_tokens=4))
    assert (p.prompts, p.identical, p.errors) == (4, 3, 0)
    assert "prompt 3:" in p.message


def test_max_tokens_is_sent(pair):
    a, b = pair
    seen = []

    async def request(method, url, body, headers, timeout):
        seen.append(body)
        return await pr.aiohttp_request(method, url, body, headers, timeout)

    run(pr.probe(pod("s", a.port), pod("c", b.port), port_of=http_port, max_tokens=17, request=request))
    assert len(seen) == 8
    assert all(b_["max_tokens"] == 17 and b_["temperature"] == 0 and b_["model"] == MODEL for b_ in seen)


def test_api_key_is_sent_and_never_shown():
    key = "sk-probe-0123456789"
    a, b = standin(api_key=key), standin(api_key=key)
    try:
        ok = run(pr.probe(pod("s", a.port), pod("c", b.port), port_of=http_port, api_key=key, max_tokens=4))
        assert (ok.prompts, ok.identical, ok.errors) == (4, 4, 0)
        # without it (or the wrong one) every prompt fails, with a message that names the key's field
        for wrong in (None, "sk-wrong"):
            no = run(pr.probe(pod("s", a.port), pod("c", b.port), port_of=http_port, api_key=wrong, max_tokens=4))
            assert (no.prompts, no.identical, no.errors) == (4, 0, 4)
            assert "HTTP 401" in no.message and "spec.engine.apiKey" in no.message
            assert key not in no.message and "sk-wrong" not in no.message
    finally:
        a.stop()
        b.stop()


def test_model_from_v1_models_when_the_args_do_not_name_it(pair):
    a, b = pair
    bare_s, bare_c = pod("s", a.port, args=["--port", "1"]), pod("c", b.port, args=[])
    assert pr.served_model(bare_s) is None
    p = run(pr.probe(bare_s, bare_c, port_of=http_port, max_tokens=4))
    assert (p.prompts, p.identical, p.errors) == (4, 4, 0)


def test_a_wrong_model_name_is_an_error_not_a_difference(pair):
    a, b = pair
    p = run(pr.probe(pod("s", a.port), pod("c", b.port, args=["other/model"]), port_of=http_port, max_tokens=4))
    assert (p.prompts, p.identical, p.errors) == (4, 0, 4)
    assert "canary pod c" in p.message and "HTTP 404" in p.message and "does not exist" in p.message


def test_unreachable_pod_never_raises(pair):
    a, _ = pair
    dead = EngineStandin("vllm").start()
    port = dead.port
    dead.stop()
    p = run(pr.probe(pod("s", a.port), pod("c", port), port_of=http_port, max_tokens=4, timeout=5))
    assert (p.prompts, p.identical, p.errors) == (4, 0, 4)
    assert "canary pod c: ClientConnectorError" in p.message or "canary pod c:" in p.message
    nowhere = pod("c", 8000)
    nowhere["status"].pop("podIP")
    p = run(pr.probe(pod("s", a.port), nowhere, port_of=http_port, max_tokens=4))
    assert p.errors == 4 and "no pod IP or http port" in p.message


@pytest.mark.parametrize("answer,want", [
    ((200, b"x" * (pr.MAX_BODY + 1)), "larger than"),
    ((200, b"not json"), "not JSON"),
    ((200, b'{"choices": []}'), "no choices[0].text"),
    ((500, b'{"message": "engine dead"}'), "HTTP 500: engine dead"),
    ("slow", "no answer within 0.2s"),
    ("raise", "OSError: boom"),
])
def test_bad_answers_count_as_errors(answer, want):
    async def request(method, url, body, headers, timeout):
        if answer == "slow":
            await asyncio.sleep(timeout + 5)
        if answer == "raise":
            raise OSError("boom")
        return answer

    p = run(pr.probe(pod("s", 1), pod("c", 2), port_of=http_port, request=request, timeout=0.2, prompt_set=["a", "b"]))
    assert (p.prompts, p.identical, p.errors) == (2, 0, 2)
    assert want in p.message


def _rendered_pod(engine: str, version: str, **engine_extra) -> dict:
    from specdeploy.api.types import SpeculativeDeployment
    from specdeploy.core.render import render
    from testkit import pair as model_pair

    cr = SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "qwen36", "namespace": "models"},
        "spec": {"engine": {"name": engine, "version": version, **engine_extra},
                 "target": {"model": "Qwen/Qwen3.6-27B"}, "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"},
                 "gpu": {"type": "b300", "count": 1}}})
    d, t = model_pair("qwen3.6-27b")
    [w] = [o for o in render(cr, t, d).objects if o["kind"] == "Deployment"]
    tpl = w["spec"]["template"]
    return {"metadata": tpl["metadata"], "spec": tpl["spec"]}


@pytest.mark.parametrize("engine,version", [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_served_model_of_rendered_pods(engine, version):
    assert pr.served_model(_rendered_pod(engine, version)) == "Qwen/Qwen3.6-27B"
    assert pr.served_model(_rendered_pod(engine, version, extraArgs=["--served-model-name", "qwen"])) == "qwen"


@pytest.mark.parametrize("args,engine,want", [
    (["m/x", "--port", "8000"], "vllm", "m/x"),
    (["--port", "8000", "--model", "m/y"], "vllm", "m/y"),
    (["m/x", "--served-model-name=a", "b"], "vllm", "a"),
    (["m/x", "--served-model-name", "a", "b"], "vllm", "a"),
    (["--model-path", "m/z", "--port", "30000"], "sglang", "m/z"),
    (["--model-path=m/z"], "sglang", "m/z"),
    (["--model-path", "$(MODEL)"], "sglang", None),
    ([], "vllm", None),
])
def test_served_model_from_args(args, engine, want):
    assert pr.served_model(pod("p", 1, args=args, engine=engine)) == want


@pytest.mark.parametrize("body,want", [
    ({}, (True, 32)),
    ({"spec": {"rollout": {"strategy": "Canary"}}}, (True, 32)),
    ({"spec": {"rollout": {"analysis": {"probe": {"enabled": False}}}}}, (False, 32)),
    ({"spec": {"rollout": {"analysis": {"probe": {"maxTokens": 64}}}}}, (True, 64)),
    ({"spec": {"rollout": {"analysis": {"probe": {"enabled": "no", "maxTokens": 999}}}}}, (True, 32)),
    ({"spec": {"rollout": "Canary"}}, (True, 32)),
    ({"spec": None}, (True, 32)),
])
def test_settings_from_a_raw_body(body, want):
    assert pr.settings(body) == want


def test_api_key_ref():
    assert pr.api_key_ref({"spec": {"engine": {"apiKey": {"secretKeyRef": {"name": "k", "key": "api"}}}}}) == ("k", "api")
    assert pr.api_key_ref({"spec": {"engine": {"apiKey": {"secretKeyRef": {"name": "k"}}}}}) == ("k", "token")
    assert pr.api_key_ref({"spec": {"engine": {"name": "vllm"}}}) is None
    assert pr.api_key_ref({"spec": {"engine": {"apiKey": "k"}}}) is None


def test_the_vllm_stand_in_requires_vllm_api_key(tmp_path):
    """``--as-vllm`` (the dev kubelet's vllm) reads VLLM_API_KEY as vLLM does: the probe needs the key."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    env = {**os.environ, "VLLM_API_KEY": "sk-dev-1"}
    proc = subprocess.Popen([sys.executable, "-m", "specdeploy_dev.engine_standin", "--as-vllm", "serve", MODEL,
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the stand-in did not start"
                time.sleep(0.2)
        p = pod("s", port)
        no = run(pr.probe(p, p, port_of=http_port, max_tokens=2, prompt_set=["a"]))
        yes = run(pr.probe(p, p, port_of=http_port, max_tokens=2, prompt_set=["a"], api_key="sk-dev-1"))
        assert (no.errors, "HTTP 401" in no.message) == (1, True)
        assert (yes.identical, yes.errors) == (1, 0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
