"""Admission: the installed Mutating- and ValidatingWebhookConfigurations, called as kube-apiserver does.

Mirrors k8s.io/apiserver/pkg/admission/plugin/webhook:
- order: every mutating webhook (configurations sorted by name, webhooks in their order), then
  the object's schema validation (done by the caller), then every validating webhook;
- matching: ``rules`` (operations, apiGroups, apiVersions, resources incl. ``*``, ``*/status``,
  ``plural/sub``, scope), ``namespaceSelector`` (the labels of the object's namespace; a
  Namespace matches on its own labels), ``objectSelector`` (old or new object's labels);
  admissionregistration objects are never sent to webhooks;
- the call: AdmissionReview v1 over HTTPS, ``clientConfig.url`` or ``clientConfig.service``
  (resolved through the Service's Endpoints to an address, as the API server does with endpoint
  routing; TLS verified against ``caBundle`` with the server name ``<service>.<namespace>.svc``),
  ``timeoutSeconds`` (default 10), ``?timeout=<n>s`` on the URL;
- ``failurePolicy`` Fail (default): a call that fails refuses the request with 500
  ``failed calling webhook "<name>": ...``; Ignore: the webhook is skipped;
- a denial: ``admission webhook "<name>" denied the request: <message>`` with the webhook's code
  (at least 400) and reason; warnings become ``Warning`` headers; a mutating webhook's JSONPatch
  is applied to the object;
- ``dryRun``: webhooks whose ``sideEffects`` is not None/NoneOnDryRun refuse the request;
- the client certificate: the front-proxy one (frontproxy.py), on every HTTPS call, as a kube-apiserver whose
  admission configuration names it for the webhook's Service presents it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import ssl
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .common import JSON, ApiError, _meta
from .patches import json_patch
from .resources import ResourceInfo
from .selectors import match_label_selector


@dataclass
class AdmitContext:
    """What one write request carries into admission."""

    operation: str  # CREATE, UPDATE, DELETE
    validation: str = "Ignore"  # fieldValidation: Ignore, Warn, Strict
    dry_run: bool = False
    sub: str | None = None
    warnings: list[str] = field(default_factory=list)
    manager: str | None = None  # the field manager of the write (managedFields; ssa.py)


USER = {"username": "specdeploy-dev", "uid": "specdeploy-dev", "groups": ["system:masters", "system:authenticated"]}


def _match_rule(rule: JSON, op: str, info: ResourceInfo, sub: str | None) -> bool:
    ops = rule.get("operations") or []
    if "*" not in ops and op not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and info.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and info.version not in versions:
        return False
    ok = False
    for res in rule.get("resources") or []:
        plural, slash, rsub = res.partition("/")
        if res == "*/*":
            ok = True
        elif plural in ("*", info.plural):
            # "x" is the resource itself, "x/*" any of its subresources, "x/status" that one
            ok = (not slash and sub is None) or (rsub == "*" and sub is not None) or (bool(slash) and rsub == sub)
        if ok:
            break
    if not ok:
        return False
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and not info.namespaced:
        return False
    if scope == "Cluster" and info.namespaced:
        return False
    return True


class Admission:
    """Runs the webhooks of the store's configurations (``store`` is the server state)."""

    def __init__(self, store: Any):
        self.store = store
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str | None, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _configurations(self, kind: str) -> list[JSON]:
        info = self.store.find_resource(kind, "admissionregistration.k8s.io", "v1")
        if info is None:
            return []
        return sorted(self.store.bucket(info).objects.values(), key=lambda o: _meta(o).get("name", ""))

    def _namespace_labels(self, info: ResourceInfo, obj: JSON) -> dict[str, str]:
        if info.storage_key == ("", "namespaces"):
            labels = dict(_meta(obj).get("labels") or {})
            labels.setdefault("kubernetes.io/metadata.name", _meta(obj).get("name", ""))
            return labels
        ns = _meta(obj).get("namespace")
        nsobj = self.store.buckets[("", "namespaces")].objects.get((None, ns)) if ns else None
        labels = dict(_meta(nsobj).get("labels") or {}) if nsobj else {}
        if ns:
            labels.setdefault("kubernetes.io/metadata.name", ns)  # set by the real server on every namespace
        return labels

    def _matches(self, hook: JSON, op: str, info: ResourceInfo, sub: str | None, obj: JSON | None,
                 old: JSON | None) -> bool:
        if not any(_match_rule(r, op, info, sub) for r in hook.get("rules") or []):
            return False
        subject = obj if obj is not None else old or {}
        if info.namespaced or info.storage_key == ("", "namespaces"):
            if not match_label_selector(hook.get("namespaceSelector"), self._namespace_labels(info, subject)):
                return False
        sel = hook.get("objectSelector")
        if sel:
            if not any(match_label_selector(sel, _meta(o).get("labels") or {}) for o in (obj, old) if o is not None):
                return False
        return True

    def hooks(self, mutating: bool, op: str, info: ResourceInfo, sub: str | None, obj: JSON | None,
              old: JSON | None) -> list[JSON]:
        if info.group == "admissionregistration.k8s.io":
            return []
        kind = "mutatingwebhookconfigurations" if mutating else "validatingwebhookconfigurations"
        out = []
        for cfg in self._configurations(kind):
            for hook in cfg.get("webhooks") or []:
                if self._matches(hook, op, info, sub, obj, old):
                    out.append(hook)
        return out

    async def run(self, ctx: AdmitContext, info: ResourceInfo, obj: JSON | None, old: JSON | None,
                  mutating: bool) -> JSON | None:
        """Call the matching webhooks; returns the (possibly mutated) object; raises on denial."""
        for hook in self.hooks(mutating, ctx.operation, info, ctx.sub, obj, old):
            if ctx.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
                raise ApiError(400, f"admission webhook \"{hook.get('name')}\" does not support dry run",
                               reason="BadRequest")
            response = await self._call(hook, ctx, info, obj, old)
            if response is None:
                continue  # failurePolicy Ignore
            ctx.warnings.extend(w for w in response.get("warnings") or [] if isinstance(w, str))
            if not response.get("allowed"):
                raise denial(hook.get("name", ""), response.get("status"))
            if mutating and obj is not None and response.get("patch"):
                if response.get("patchType") != "JSONPatch":
                    raise ApiError(500, f"failed calling webhook \"{hook.get('name')}\": unsupported patch type "
                                        f"{response.get('patchType')!r}", reason="InternalError")
                try:
                    ops = json.loads(base64.b64decode(response["patch"]))
                except (binascii.Error, ValueError):
                    raise ApiError(500, f"failed calling webhook \"{hook.get('name')}\": the patch is not "
                                        "base64-encoded JSON", reason="InternalError") from None
                obj = json_patch(obj, ops)
        return obj

    def review(self, ctx: AdmitContext, info: ResourceInfo, obj: JSON | None, old: JSON | None) -> JSON:
        subject = obj if obj is not None else old or {}
        meta = _meta(subject)
        options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[ctx.operation]
        request: JSON = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": info.group, "version": info.version, "kind": info.kind},
            "resource": {"group": info.group, "version": info.version, "resource": info.plural},
            "requestKind": {"group": info.group, "version": info.version, "kind": info.kind},
            "requestResource": {"group": info.group, "version": info.version, "resource": info.plural},
            "name": meta.get("name", ""), "operation": ctx.operation, "userInfo": USER,
            "object": obj, "oldObject": old, "dryRun": ctx.dry_run,
            "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"}}
        if info.namespaced:
            request["namespace"] = meta.get("namespace", "")
        if ctx.sub:
            request["subResource"] = ctx.sub
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

    def _client_context(self, pem: str | None) -> ssl.SSLContext:
        """The TLS client context for a caBundle (kept: one per bundle), presenting the front-proxy certificate."""
        ctx = self._contexts.get(pem)
        if ctx is None:
            ctx = ssl.create_default_context(cadata=pem) if pem else ssl.create_default_context()
            front_proxy = getattr(getattr(self.store, "emulator", None), "front_proxy", None)
            if front_proxy is not None:
                front_proxy.present(ctx)
            if len(self._contexts) > 64:
                self._contexts.clear()
            self._contexts[pem] = ctx
        return ctx

    def _endpoint(self, hook: JSON) -> tuple[str, str | None, str | None]:
        """(URL to connect to, TLS server name, PEM CA bundle)."""
        cfg = hook.get("clientConfig") or {}
        ca = cfg.get("caBundle")
        try:
            pem = base64.b64decode(ca).decode() if ca else None
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise _call_error(hook, "the caBundle is not base64-encoded PEM")
        if cfg.get("url"):
            return cfg["url"], None, pem
        svc = cfg.get("service") or {}
        name, ns, port = svc.get("name", ""), svc.get("namespace", ""), int(svc.get("port") or 443)
        path = svc.get("path") or "/"
        service = self.store.buckets[("", "services")].objects.get((ns, name))
        if service is None:
            raise _call_error(hook, f'service "{name}" not found')
        target: Any = port
        for p in (service.get("spec") or {}).get("ports") or []:
            if int(p.get("port", 0)) == port:
                target = p.get("targetPort", port)
                break
        eps = self.store.buckets[("", "endpoints")].objects.get((ns, name))
        for subset in (eps or {}).get("subsets") or []:
            addresses = subset.get("addresses") or []
            for p in subset.get("ports") or []:
                if addresses and (p.get("name") == target or p.get("port") == target or
                                  (isinstance(target, str) and target.isdigit() and p.get("port") == int(target))):
                    return f"https://{addresses[0]['ip']}:{p['port']}{path}", f"{name}.{ns}.svc", pem
        raise _call_error(hook, f'no endpoints available for service "{name}"')

    async def _call(self, hook: JSON, ctx: AdmitContext, info: ResourceInfo, obj: JSON | None,
                    old: JSON | None) -> JSON | None:
        timeout = int(hook.get("timeoutSeconds") or 10)
        fail = (hook.get("failurePolicy") or "Fail") == "Fail"
        try:
            url, server_name, pem = self._endpoint(hook)
            sslctx: ssl.SSLContext | bool = True
            if url.startswith("https://"):
                sslctx = self._client_context(pem)
            if self._session is None:
                self._session = aiohttp.ClientSession()
            sep = "&" if "?" in url else "?"
            async with self._session.post(f"{url}{sep}timeout={timeout}s", json=self.review(ctx, info, obj, old),
                                          ssl=sslctx,
                                          server_hostname=server_name,
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status != 200:
                    raise _call_error(hook, f"the server responded with status {resp.status}")
                body = await resp.json(content_type=None)
            response = body.get("response") if isinstance(body, dict) else None
            if not isinstance(response, dict):
                raise _call_error(hook, "the response has no AdmissionReview response")
            return response
        except ApiError:
            if fail:
                raise
            return None
        except (aiohttp.ClientError, asyncio.TimeoutError, ssl.SSLError, OSError, ValueError) as e:
            if fail:
                what = "context deadline exceeded" if isinstance(e, asyncio.TimeoutError) else str(e) or type(e).__name__
                raise _call_error(hook, what) from None
            return None


def _call_error(hook: JSON, what: str) -> ApiError:
    return ApiError(500, f"Internal error occurred: failed calling webhook \"{hook.get('name', '')}\": "
                         f"failed to call webhook: {what}", reason="InternalError")


def denial(name: str, status: Any) -> ApiError:
    """The real server's StatusError for a webhook's refusal (webhookerrors.ToStatusErr)."""
    status = dict(status) if isinstance(status, dict) else {}
    code = int(status.get("code") or 0)
    if code < 400:
        code = 400
    denied = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied}: {status['reason']}"
    else:
        message = f"{denied} without explanation"
    return ApiError(code, message, reason=status.get("reason") or "", details=status.get("details"))
