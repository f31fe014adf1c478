"""The canary probe: the operator's own greedy prompts to one stable and one canary pod.

Speculative decoding must not change greedy outputs: a drafter only proposes tokens the target
verifies. So the same prompt at temperature 0 must give the same text on the stable revision and on
the canary, whatever drafter, speculation settings or engine build each runs, as long as the target
model is the same. The probe sends a small fixed prompt set (``data/prompts/rollout-probe.json``)
to one ready pod of each track, ``POST /v1/completions`` (the OpenAI completions API both engines
serve) by pod IP and the ``http`` port, and counts the prompts whose completions are identical
(``core.rollout.canary.Probe``); the judgement (``core.rollout.canary.judge``) fails a canary whose outputs differ.
It runs once per canary revision (the acceptance monitor starts it, controller/monitor.py), so a
deployment with little traffic is still judged on something.

- **Model**: the served model name from the engine container's args, as core/render/argv.py renders
  them (``--served-model-name`` from extraArgs first; else vLLM's positional model after ``vllm
  serve``, SGLang's ``--model-path``); when the args do not name one, ``GET /v1/models``.
- **API key** (``spec.engine.apiKey``): the monitor reads the key from its Secret and the probe sends
  ``Authorization: Bearer <key>``; the key is never logged or put into a message.
- **Bounded**: every request has a timeout, bodies are read up to ``MAX_BODY`` bytes; nothing here
  raises: a failure counts in ``Probe.errors`` with its message (``probe`` returns a ``Probe`` always).
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from typing import Any, Awaitable, Callable, Mapping

from ..core import names as N
from ..core.rollout.canary import Probe
from specdeploy.core.errors import Retryable

PROMPTS_FILE = "rollout-probe.json"
DEFAULT_MAX_TOKENS = 32
MAX_TOKENS_LIMIT = 256  # spec.rollout.analysis.probe.maxTokens' bound
MAX_BODY = 256 * 1024  # bytes of one answer read at most
DEFAULT_TIMEOUT = 60.0  # seconds per request (a CPU engine decodes 32 tokens well within it)
TEXT_SHOWN = 60  # characters of each differing completion quoted in the message

# (method, url, JSON body or None, headers, timeout seconds) -> (HTTP status, body up to MAX_BODY bytes); may raise
Request = Callable[[str, str, "dict | None", Mapping[str, str], float], Awaitable[tuple[int, bytes]]]


class ProbeError(Retryable):
    """One request of the probe failed (the message says which pod and why; never the API key)."""


def prompts() -> list[str]:
    """The bundled probe prompts."""
    text = resources.files("specdeploy.data").joinpath("prompts", PROMPTS_FILE).read_text(encoding="utf-8")
    return [p for p in json.loads(text)["prompts"] if isinstance(p, str)]


# ----------------------------------------------------------------- what the probe reads of a pod and a spec


def _engine_container(pod: dict) -> dict:
    containers = [c for c in ((pod.get("spec") or {}).get("containers") or []) if isinstance(c, dict)]
    for c in containers:
        if c.get("name") == "engine":
            return c
    return containers[0] if containers else {}


def _flag(args: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--flag VALUE`` or ``--flag=VALUE``)."""
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args) and not args[i + 1].startswith("-"):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def served_model(pod: dict) -> str | None:
    """The model name the pod's engine serves, from its args (None when they do not say: ask /v1/models).

    ``--served-model-name`` (vLLM takes several: the first), else SGLang's ``--model-path`` (or its
    alias ``--model``), else vLLM's model: the first positional argument of ``vllm serve`` (the
    render puts it first in args) or ``--model``. A value with a kubelet variable (``$(VAR)``) is not a
    name the probe can know."""
    c = _engine_container(pod)
    args = [a for a in (c.get("args") or []) if isinstance(a, str)]
    command = [a for a in (c.get("command") or []) if isinstance(a, str)]
    engine = ((pod.get("metadata") or {}).get("labels") or {}).get(N.ENGINE_LABEL)
    name = _flag(args, "--served-model-name")
    if name is None:
        if engine == "sglang" or "sglang.launch_server" in command:
            name = _flag(args, "--model-path", "--model")
        else:
            positional = args[0] if args and not args[0].startswith("-") else None
            name = positional or _flag(args, "--model")
    if not name or "$(" in name:
        return None
    return name


def settings(body: Mapping[str, Any] | None) -> tuple[bool, int]:
    """(enabled, maxTokens) of ``spec.rollout.analysis.probe`` read from a raw SpeculativeDeployment body:
    defaults ``True``, ``DEFAULT_MAX_TOKENS``; a value of the wrong type reads as its default (the API
    validates them; this never raises)."""
    def sub(doc: Any, key: str) -> dict:
        v = doc.get(key) if isinstance(doc, Mapping) else None
        return v if isinstance(v, Mapping) else {}

    p = sub(sub(sub(sub(body, "spec"), "rollout"), "analysis"), "probe")
    enabled = p.get("enabled")
    enabled = enabled if isinstance(enabled, bool) else True
    mt = p.get("maxTokens")
    mt = mt if isinstance(mt, int) and not isinstance(mt, bool) and 1 <= mt <= MAX_TOKENS_LIMIT \
        else DEFAULT_MAX_TOKENS
    return enabled, mt


def api_key_ref(body: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(Secret name, key) of ``spec.engine.apiKey.secretKeyRef`` in a raw body, or None."""
    spec = body.get("spec") if isinstance(body, Mapping) else None
    engine = spec.get("engine") if isinstance(spec, Mapping) else None
    key = engine.get("apiKey") if isinstance(engine, Mapping) else None
    ref = key.get("secretKeyRef") if isinstance(key, Mapping) else None
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
        return None
    k = ref.get("key")
    return ref["name"], k if isinstance(k, str) and k else "token"


def base_url(pod: dict, port: int | None) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    if not ip or port is None:
        return None
    return f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}"


# ----------------------------------------------------------------- HTTP


async def aiohttp_request(method: str, url: str, body: dict | None, headers: Mapping[str, str],
                          timeout: float) -> tuple[int, bytes]:
    """The default transport: one request on a fresh session, the body read up to MAX_BODY + 1 bytes."""
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.request(method, url, json=body, headers=dict(headers),
                             timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            return r.status, await r.content.read(MAX_BODY + 1)


def _error_text(raw: bytes) -> str:
    """The engine's error message (OpenAI's {"error": {"message"}}, vLLM's {"message"}, or the text), short."""
    text = raw[:2000].decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(doc, dict):
        err = doc.get("error")
        msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else doc.get("message")
        if isinstance(msg, str):
            return " ".join(msg.split())[:200]
    return " ".join(text.split())[:200]


async def _call(request: Request, method: str, url: str, body: dict | None, headers: Mapping[str, str],
                timeout: float, who: str) -> Any:
    """One request -> its JSON document; ProbeError with a message on any failure."""
    try:
        status, raw = await asyncio.wait_for(request(method, url, body, headers, timeout), timeout)
    except asyncio.CancelledError:
        raise
    except asyncio.TimeoutError:
        raise ProbeError(f"{who}: no answer within {timeout:g}s") from None
    except Exception as e:  # noqa: BLE001 - unreachable pod, reset connection, anything the transport raises
        raise ProbeError(f"{who}: {type(e).__name__}: {e}"[:300] if str(e) else f"{who}: {type(e).__name__}") from None
    if len(raw) > MAX_BODY:
        raise ProbeError(f"{who}: answer larger than {MAX_BODY} bytes")
    if status != 200:
        hint = " (the engine's API key: spec.engine.apiKey)" if status in (401, 403) else ""
        raise ProbeError(f"{who}: HTTP {status}{hint}: {_error_text(raw)}")
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        raise ProbeError(f"{who}: the answer is not JSON") from None


async def _model(request: Request, pod: dict, url: str, headers: Mapping[str, str], timeout: float, who: str) -> str:
    name = served_model(pod)
    if name is not None:
        return name
    doc = await _call(request, "GET", f"{url}/v1/models", None, headers, timeout, who)
    data = doc.get("data") if isinstance(doc, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
        return data[0]["id"]
    raise ProbeError(f"{who}: /v1/models names no model")


async def _complete(request: Request, url: str, model: str, prompt: str, max_tokens: int,
                    headers: Mapping[str, str], timeout: float, who: str) -> str:
    doc = await _call(request, "POST", f"{url}/v1/completions",
                      {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": False}, headers, timeout, who)
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("text"), str):
        raise ProbeError(f"{who}: the answer has no choices[0].text")
    return choices[0]["text"]


def _quote(text: str) -> str:
    t = text if len(text) <= TEXT_SHOWN else text[:TEXT_SHOWN] + "..."
    return json.dumps(t, ensure_ascii=False)


async def probe(stable: dict, canary: dict, *, port_of: Callable[[dict], int | None], max_tokens: int = DEFAULT_MAX_TOKENS,
                api_key: str | None = None, request: Request | None = None, timeout: float = DEFAULT_TIMEOUT,
                prompt_set: list[str] | None = None) -> Probe:
    """Send every probe prompt to the ``stable`` and the ``canary`` pod (one after another on each pod, both pods
    at once) and compare the completions. Never raises (but on cancellation)."""
    request = request or aiohttp_request
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        ps = prompt_set if prompt_set is not None else prompts()
    except (OSError, ValueError, KeyError) as e:  # a broken package: nothing to send
        return Probe(prompts=0, identical=0, errors=1, message=f"the probe prompts cannot be read: {e}"[:300])
    pods = {"stable": stable, "canary": canary}
    names = {t: f"{t} pod {(p.get('metadata') or {}).get('name') or '?'}" for t, p in pods.items()}

    async def run_track(track: str) -> tuple[list[str | None], list[str]]:
        """Completions per prompt (None: failed) and the failures' messages."""
        pod, who = pods[track], names[track]
        url = base_url(pod, port_of(pod))
        if url is None:
            return [None] * len(ps), [f"{who}: no pod IP or http port"]
        try:
            model = await _model(request, pod, url, headers, timeout, who)
        except ProbeError as e:
            return [None] * len(ps), [str(e)]
        texts: list[str | None] = []
        errors: list[str] = []
        for i, prompt in enumerate(ps):
            try:
                texts.append(await _complete(request, url, model, prompt, max_tokens, headers, timeout, who))
            except ProbeError as e:
                texts.append(None)
                errors.append(f"prompt {i + 1}: {e}")
        return texts, errors

    (s_texts, s_err), (c_texts, c_err) = await asyncio.gather(run_track("stable"), run_track("canary"))
    identical = errors = 0
    differ: list[str] = []
    for i, (a, b) in enumerate(zip(s_texts, c_texts)):
        if a is None or b is None:
            errors += 1
        elif a == b:
            identical += 1
        else:
            differ.append(f"prompt {i + 1}: stable {_quote(a)} vs canary {_quote(b)}")
    parts = [f"{identical}/{len(ps)} prompts identical at temperature 0 ({max_tokens} tokens)"]
    if differ:
        parts.append(f"{len(differ)} differ; {differ[0]}")
    if errors:
        msgs = s_err + c_err
        parts.append(f"{errors} failed; {msgs[0] if msgs else 'no answer'}")
    return Probe(prompts=len(ps), identical=identical, errors=errors, message="; ".join(parts)[:1000])


__all__ = ["DEFAULT_MAX_TOKENS", "MAX_BODY", "Probe", "ProbeError", "api_key_ref", "base_url", "probe", "prompts",
           "served_model", "settings"]
