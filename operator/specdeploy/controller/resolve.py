"""Resolve a model's config.json: ConfigMap key, Hugging Face hub, or a PVC inspector Job.

Each source returns a ``Resolved`` (document, digest, where it came from, resolved commit)
or raises ``ResolutionError`` with a CamelCase reason that becomes the DrafterCompatible
condition's reason, and whether retrying soon can help.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..core import memo, safejson
from ..core.engineconfig import config_digest
from ..core import engines as eng
from ..core import names as N
from ..core.render import Admitted, build_inspector_job, inspector_job_name  # noqa: F401 (resolve.* for its readers)
from . import ownership
from .kube import Kube
from .status import age_seconds
from specdeploy.core.errors import SpecdeployError

HUB_BRANCH_TTL = 900.0  # a branch or tag is re-resolved after this many seconds
# an inspector Job not finished this long after its creation is deleted and the resolution says so
INSPECT_DEADLINE = 900.0  # the PVC inspector Job (settings.OperatorSettings.inspect_deadline)
INSPECT_RETRY = 300.0  # then a new inspector starts after this many seconds
# the resolver's caches (docs/concepts/security.md "Bounded memory"): entries, and bytes the entries keep alive
PARSED_ENTRIES, PARSED_BYTES = 256, 24 * memo.MiB
HUB_CACHE_ENTRIES, HUB_CACHE_BYTES = 256, 24 * memo.MiB
SECRET_CREDS_ENTRIES, SECRET_CREDS_BYTES = 4096, 2 * memo.MiB


@dataclass(frozen=True)
class Resolved:
    doc: Any
    digest: str
    source: str
    commit: str | None = None


# The drafter of a drafterless method (mtp, ngram, suffix): no document to check, nothing to pin.
NO_MODEL = Resolved(doc=None, digest="", source="none")


class ResolutionError(SpecdeployError, retryable=True):
    """``conflict``: ``Kind/name (why)`` of an object the resolution would have written but does not control
    (the inspector Job's name taken): the reconciler reports it as ChildConflict."""

    def __init__(self, reason: str, message: str, retryable: bool = True, delay: float | None = None,
                 conflict: str | None = None):
        self.reason, self.message, self.retryable, self.delay = reason, message, retryable, delay
        self.conflict = conflict
        super().__init__(f"{reason}: {message}")


def _parse_json(text: str | bytes, where: str) -> Any:
    try:
        return safejson.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ResolutionError("ConfigInvalid", f"{where} is not valid JSON ({e}); put the model's config.json there", retryable=False) from None


def decode_inspection(message: str) -> tuple[Any, str]:
    """Parse the inspector's termination message: {"digest", "gz": base64(gzip(config.json))}."""
    try:
        env = json.loads(message)
        raw = gzip.decompress(base64.b64decode(env["gz"]))
        doc = safejson.loads(raw)
    except (ValueError, KeyError, TypeError, binascii.Error, OSError, EOFError) as e:
        raise ResolutionError("InspectionInvalid", f"the inspector's result could not be read ({e})") from None
    return doc, env.get("digest") or config_digest(doc)


def _pinned(revision: str | None) -> bool:
    return bool(revision) and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)


class Resolver:
    """Resolves configs for the reconciler; caches hub results by (repo, revision, credential)."""

    def __init__(self, kube: Kube, hub_fetch=None, hub_endpoint: str | None = None, clock=time.monotonic,
                 inspect_deadline: float = INSPECT_DEADLINE):
        self.kube = kube
        self.inspect_deadline = inspect_deadline
        self.hub_fetch = hub_fetch
        self.hub_endpoint = hub_endpoint
        self.clock = clock
        # Bounded in entries and bytes (docs/concepts/security.md "Bounded memory"):
        # (model, revision, hub.credential_id(token)) -> (when, Resolved)
        self._hub_cache = memo.BoundedLRU("resolver.hub", HUB_CACHE_ENTRIES, HUB_CACHE_BYTES)
        # (namespace, Secret, key) of a tokenSecretRef -> the credential it held when last read (for the webhook)
        self._secret_creds = memo.BoundedLRU("resolver.secret_credentials", SECRET_CREDS_ENTRIES, SECRET_CREDS_BYTES)
        # (ns, name) -> body, fed by the watch of the ConfigMaps that CRs reference (controller/cache.py): the
        # cluster's objects, at most one per referenced ConfigMap, not a memo
        self.configmaps: dict[tuple[str, str], dict] = {}
        # (ns, name, key) -> (the key's text, its Resolved): one parse and digest per ConfigMap text, and one
        # document object that the checker's memo (core/checker/derive.analyze) recognises
        self._parsed = memo.BoundedLRU("resolver.parsed", PARSED_ENTRIES, PARSED_BYTES)

    async def resolve(self, admitted: Admitted, role: str) -> Resolved:
        """``spec.<role>``'s config.json for a spec the tenancy policy admitted (core/render/gate.admit): the policy
        is decided before a token Secret is read or an inspector Job mounts a claim on the spec's behalf."""
        if not isinstance(admitted, Admitted):
            raise TypeError("Resolver.resolve takes an Admitted spec (core/render/gate.admit), not a raw CR")
        cr = admitted.cr
        src = getattr(cr.spec, role)
        if src is None:  # no drafter: methods mtp, ngram, suffix
            return NO_MODEL
        ns = cr.metadata.namespace or "default"
        ref = src.config_from.config_map_key_ref if src.config_from else None
        if ref is not None:
            return await self._from_configmap(ns, ref.name, ref.key, role)
        if src.pvc is not None:
            return await self._from_pvc(admitted, role, src)
        return await self._from_hub(ns, src, role)

    async def _from_configmap(self, ns: str, name: str, key: str, role: str) -> Resolved:
        body = self.configmaps.get((ns, name))
        if body is None:
            body = await self.kube.get("ConfigMap", ns, name)
            if body is not None:
                self.configmaps[(ns, name)] = body
        field = f"spec.{role}.configFrom.configMapKeyRef"
        if body is None:
            raise ResolutionError("ConfigMapNotFound", f"ConfigMap {ns}/{name} ({field}) does not exist; create it with the "
                                  f"{role}'s config.json under key {key!r}")
        data = body.get("data") or {}
        if key not in data:
            raw = (body.get("binaryData") or {}).get(key)
            if raw is None:
                raise ResolutionError("ConfigMapKeyNotFound", f"ConfigMap {ns}/{name} has no key {key!r} ({field}.key); "
                                      f"keys present: {', '.join(sorted(data)) or 'none'}")
            text: str | bytes = base64.b64decode(raw)
        else:
            text = data[key]
        hit = self._parsed.get((ns, name, key))
        if hit is not None and (hit[0] is text or hit[0] == text):
            return hit[1]
        doc = memo.read_only(_parse_json(text, f"ConfigMap {ns}/{name} key {key!r}"))
        resolved = Resolved(doc, config_digest(doc), f"configmap:{ns}/{name}#{key}")
        # the text is the watch cache's (held there anyway), counted all the same
        self._parsed.put((ns, name, key), (text, resolved), sys.getsizeof(text) + memo.size_of(doc) + 512)
        return resolved

    async def _token(self, ns: str, src) -> str | None:
        ref = src.token_secret_ref
        if ref is None:
            return None
        secret = await self.kube.get("Secret", ns, ref.name)
        if secret is None or ref.key not in (secret.get("data") or {}):
            raise ResolutionError("TokenSecretNotFound", f"Secret {ns}/{ref.name} key {ref.key!r} (tokenSecretRef) is missing")
        return base64.b64decode(secret["data"][ref.key]).decode().strip()

    def hub_cached(self, ns: str, src, token: str | None = None, *, known: bool = False) -> Resolved | None:
        """The cached hub resolution of ``src`` for the credential it uses, if still fresh (a pinned commit
        stays, a branch or tag for HUB_BRANCH_TTL).

        Entries are keyed by (model, revision, credential): what one token fetched is never another
        credential's answer. With ``known`` (the webhook, which reads no Secret) the credential is the one
        this namespace's ``tokenSecretRef`` held when the reconciler last read it; none read yet: no entry."""
        from .hub import credential_id

        if known:
            ref = src.token_secret_ref
            cred = credential_id(None) if ref is None else self._secret_creds.get((ns, ref.name, ref.key))
            if cred is None:
                return None
        else:
            cred = credential_id(token)
        hit = self._hub_cache.get((src.model, src.revision, cred))
        if hit is None:
            return None
        if _pinned(src.revision) or self.clock() - hit[0] < HUB_BRANCH_TTL:
            return hit[1]
        return None

    async def _from_hub(self, ns: str, src, role: str) -> Resolved:
        if self.hub_fetch is None:
            from .hub import fetch_config  # huggingface_hub is imported only when a hub model is used

            self.hub_fetch = fetch_config
        from .hub import HubResolutionError, credential_id

        # the CR's own credential first: a cache entry is used only by the credential that fetched it
        token = await self._token(ns, src)
        cred = credential_id(token)
        if src.token_secret_ref is not None:
            self._secret_creds.put((ns, src.token_secret_ref.name, src.token_secret_ref.key), cred)
        hit = self.hub_cached(ns, src, token)
        if hit is not None:
            return hit
        try:
            got = await asyncio.to_thread(self.hub_fetch, src.model, src.revision, token=token, endpoint=self.hub_endpoint)
        except HubResolutionError as e:
            raise ResolutionError(e.reason, e.message, retryable=e.retryable) from None
        r = Resolved(memo.read_only(got.doc), got.digest, f"hub:{got.repo_id}@{got.commit}", got.commit)
        self._hub_cache.put((src.model, src.revision, cred), (self.clock(), r), memo.size_of(r.doc) + 1024)
        return r

    async def _from_pvc(self, admitted: Admitted, role: str, src) -> Resolved:
        cr = admitted.cr
        ns = cr.metadata.namespace or "default"
        image = cr.spec.engine.image or eng.get_engine(cr.spec.engine.name).default_image(cr.spec.engine.version)
        want = build_inspector_job(admitted, role, image)
        name = want["metadata"]["name"]
        job = await self.kube.get("Job", ns, name)
        why = ownership.conflict(job, cr.metadata.uid)
        if why is not None:  # neither read (its result would be trusted as the config) nor replaced
            raise ResolutionError("ChildConflict", f"Job {ns}/{name} exists and is {why}; specdeploy neither reads "
                                  f"nor replaces it: rename or delete it, or give spec.{role}.configFrom",
                                  delay=60, conflict=f"Job/{name} ({why})")
        inputs = want["metadata"]["annotations"][N.INSPECT_INPUTS_ANNOTATION]
        if job is not None and (job.get("metadata", {}).get("annotations") or {}).get(N.INSPECT_INPUTS_ANNOTATION) != inputs:
            await self.kube.delete("Job", ns, name)
            job = None
        if job is None:
            await self.kube.create(want)
            raise ResolutionError("InspectionPending", f"Job {ns}/{name} is reading config.json from PVC "
                                  f"{src.pvc.claim_name}", delay=5)
        st = job.get("status") or {}
        if not st.get("succeeded") and not st.get("failed"):
            age = age_seconds((job.get("metadata") or {}).get("creationTimestamp"))
            if age > self.inspect_deadline:  # never scheduled, or stuck: a clear verdict, then a fresh Job later
                await self.kube.delete("Job", ns, name)
                raise ResolutionError("InspectionTimedOut", f"Job {ns}/{name} did not finish within "
                                      f"{self.inspect_deadline:.0f}s of its creation (PVC {src.pvc.claim_name} not "
                                      "mountable, no node to run it?); it was deleted and a new one starts in "
                                      f"{INSPECT_RETRY:.0f}s; see kubectl get events", delay=INSPECT_RETRY)
            raise ResolutionError("InspectionPending", f"Job {ns}/{name} has not finished", delay=5)
        pods = await self.kube.list("Pod", ns, f"job-name={name}")
        messages = [((c.get("state") or {}).get("terminated") or {}).get("message")
                    for p in pods for c in ((p.get("status") or {}).get("containerStatuses") or [])]
        messages = [m for m in messages if m]
        if st.get("succeeded") and messages:
            doc, digest = decode_inspection(messages[-1])
            return Resolved(doc, digest, f"pvc:{ns}/{src.pvc.claim_name}/{src.model.lstrip('/')}")
        detail = messages[-1] if messages else "no termination message"
        raise ResolutionError("InspectionFailed", f"Job {ns}/{name} could not read config.json from PVC "
                              f"{src.pvc.claim_name} path {src.model!r}: {detail[:300]}", retryable=True, delay=60)
