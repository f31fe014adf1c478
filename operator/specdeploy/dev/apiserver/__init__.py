"""The embedded Kubernetes API server ("stand-in") for the demo and the operator/e2e tests.

It is ``kmock.KubernetesEmulator`` (kmock==0.8, by kopf's author) with a shim that replaces its
request path and its object store, because raw kmock 0.8 breaks kubectl and kopf and slows down
linearly with traffic. One file on purpose: everything that leans on kmock lives here.

What the shim fixes (numbered as in the test-stack reference, "The stand-in API server needs a shim"):

1. POSTing (or applying/patching) a CRD registers its resource for every served version: group,
   version, plural, kind, listKind, singular, shortNames, categories, scope, verbs, the status
   and scale subresources and additionalPrinterColumns (served as server-side Tables for
   ``kubectl get``). The CRD gets Established/NamesAccepted conditions. Deleting it removes the
   resource and all its objects.
2. ``GET /api/v1`` is an APIResourceList with ``groupVersion: v1`` (plus ``<plural>/status`` and
   ``<plural>/scale`` entries), so kubectl finds the core resources.
3. ``/api/v1/namespaces`` and ``/api/v1/namespaces/<name>[/status]`` are the Namespace resource,
   parsed by our own path parser (kmock's returns 500).
4. Lists carry ``kind: <Kind>List``, ``apiVersion`` and a numeric ``metadata.resourceVersion``.
5. Objects get their namespace from the URL, a uid, a global monotonic resourceVersion,
   creationTimestamp, ``generation`` (1 on create; +1 when anything outside metadata changes,
   status excluded for resources with a status subresource, as the real server does; +1 when
   deletionTimestamp is set), and ``generateName`` (5 random characters, as the real server).
6. Watches are ``application/json`` chunked, one JSON event per line.
7. No watch race: the snapshot and the subscription happen in one synchronous step on the event
   loop, so no event can fall in between. ``resourceVersion`` is honoured (events after it are
   replayed from a per-resource event log; too old -> ERROR 410 Expired), ``timeoutSeconds`` ends
   the stream cleanly. Events are ADDED/MODIFIED/DELETED only (no BOOKMARKs, except the
   ``k8s.io/initial-events-end`` one a client asks for with ``sendInitialEvents=true``); an
   object that starts/stops matching a label or field selector is sent as ADDED/DELETED.
8. A failed JSON-patch ``test`` op (and any invalid JSON patch) is 422 Unprocessable Entity.
9. Trailing slashes are ignored (``/version/``); PUT replaces (409 on a resourceVersion
   mismatch); ``?dryRun=All`` computes and returns the result without storing it, bumping the
   resourceVersion or notifying watchers; label selectors (``=``, ``==``, ``!=``, ``in``,
   ``notin``, ``key``, ``!key``) and field selectors (``=``, ``==``, ``!=`` on any dotted path,
   e.g. ``metadata.name``, ``metadata.namespace``, ``involvedObject.uid``) on list, watch and
   deletecollection.

Also: status subresource isolation (writes to ``/status`` change only ``.status``; writes to the
main resource keep the stored ``.status`` when the resource has a status subresource, and a create
drops it), the scale subresource (autoscaling/v1 Scale), merge patch (RFC 7386), strategic merge
patch (merge patch plus merging of the usual keyed lists: containers/env/volumes by name,
volumeMounts by mountPath, ports by containerPort/port, conditions by type, and ``$patch``/
``$setElementOrder``/``$retainKeys``/``$deleteFromPrimitiveList`` directives; 415 for custom
resources, like the real server), JSON patch (RFC 6902), server-side apply, DELETE with
finalizers (deletionTimestamp, removal when the last finalizer goes), deletion preconditions,
cascading deletion through ownerReferences (Background, Foreground via the
``foregroundDeletion`` finalizer, Orphan), deletecollection, namespace deletion (its objects go,
then the namespace), 404 for objects in a missing namespace and 403 in a terminating one,
discovery (``/api``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``), ``/version``,
``/healthz``, ``/livez``, ``/readyz``, both core v1 and ``events.k8s.io/v1`` Events, and the
``default``, ``kube-system`` and ``kube-public`` namespaces seeded at start.

Simplifications (deliberate; say so when a test depends on them):

- Server-side apply: a PATCH with ``application/apply-patch+yaml`` creates the object when absent,
  otherwise merges the applied configuration (keyed lists merged as in strategic merge patch) and
  removes the fields that the same ``fieldManager`` applied last time but no longer applies (unless
  another apply manager still applies them). Field ownership is tracked per manager as a set of
  leaf paths (lists are leaves); conflicts between managers are never reported, so ``force``
  changes nothing. ``managedFields`` is filled for Apply operations only.
- No OpenAPI (``/openapi/v2`` and ``/openapi/v3`` are 404): kubectl needs ``--validate=false``.
  No protobuf, no CRD schema validation/defaulting/pruning, no conversion between versions (versions
  of a CRD share one storage, objects are served with the requested apiVersion), no admission
  webhooks, no RBAC, no authentication (any token works), no controllers (Deployments never get
  pods; tests patch ``/status`` like controller tests on a bare API server), no ``limit``/
  ``continue`` paging (lists are always complete, which clients accept), no graceful pod deletion.
- The garbage collector runs synchronously inside the DELETE that removes an owner; owners are
  matched by uid only and dangling ownerReferences are not collected.

Scale: kmock 0.8 records every request and evaluates its filter DSL over that whole history on
each request. Here the history is a ``deque(maxlen=history_limit)`` (default 64, 0 disables it),
the DSL is consulted only when a test added its own reactions (``emulator['get /x'] << ...``),
and objects live in a per-resource index: ``{(group, plural): bucket}`` where a bucket holds
``{(namespace, name): object}`` plus ``{namespace: {name: object}}`` and its event log. Versions
of one resource share a bucket, as they share storage on a real cluster. Stored objects are never
mutated in place: each write stores a new dict, so watch events can reference them safely.

Fault injection: ``emulator.faults.add(verb=..., resource=..., name=..., status=..., count=N)``
in-process, or ``POST /_specdeploy/faults`` with the same JSON over HTTP (see ``Fault``), plus
``POST /_specdeploy/watches/drop`` and ``/_specdeploy/watches/expire`` for open watches, and
``GET /_specdeploy/stats``.

kmock private names this module relies on (hence ``kmock==0.8`` exactly in pyproject.toml):

- ``kmock._internal.apps.RawHandler._handle``: runs test-defined DSL reactions (only when a test
  added some); it raises ``NotImplementedError`` when none matches.
- ``kmock._internal.dsl.Root._requests`` (replaced by a bounded deque) and ``Root._payloads``
  (read to know whether any reactions exist).
- ``KubernetesEmulator.__attrs_post_init__`` is deliberately NOT called: it would register
  kmock's own fallback reactions, which this shim replaces.
- ``attrs.define`` slotted classes: the subclass declares its fields with attrs too.
Public names used: ``kmock.KubernetesEmulator``, ``kmock.Request``, ``kmock.resource``,
``kmock.method``, ``kmock.action``.

Entry points: ``await start(port=0)`` -> ``ApiServer`` (``.url``, ``.port``, ``.emulator``,
``await .stop()``); ``serve_in_thread()`` -> ``ThreadedApiServer`` for synchronous tests;
``write_kubeconfig(path, url)``; ``main(argv)`` for ``specdeploy dev apiserver --kubeconfig PATH
[--port N]`` (also ``python -m specdeploy.dev.apiserver``).
"""

from .common import ALL_VERBS, JSON, SERVER_VERSION, ApiError
from .faults import Fault, FaultInjector
from .patches import json_patch, merge_patch, strategic_merge_patch
from .resources import ResourceInfo
from .selectors import jsonpath, parse_field_selector, parse_label_selector
from .server import ApiServer, Emulator, ThreadedApiServer, main, serve_in_thread, start, write_kubeconfig

__all__ = [
    "ALL_VERBS", "JSON", "SERVER_VERSION", "ApiError", "Fault", "FaultInjector", "json_patch", "merge_patch",
    "strategic_merge_patch", "ResourceInfo", "jsonpath", "parse_field_selector", "parse_label_selector",
    "ApiServer", "Emulator", "ThreadedApiServer", "main", "serve_in_thread", "start", "write_kubeconfig",
]
