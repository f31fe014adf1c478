"""The embedded Kubernetes API server ("stand-in") for the demo and the operator/e2e tests.

``specdeploy dev apiserver --kubeconfig PATH`` serves it; kubectl (validation on), Helm 3 and 4,
the kubernetes client, kopf and the real operator use it as a cluster. It is
``kmock.KubernetesEmulator`` (kmock==0.8, by kopf's author) with its request path and object store
replaced. docs/how-to/develop-locally.md says what it does and does not do, for users.

Modules, one concern each (each with its tests under tests/apiserver/):

- ``server``: the Emulator (the kmock subclass; every kmock private name is used here), start/stop,
  ``serve_in_thread``, ``write_kubeconfig``, the CLI.
- ``storage``: the indexed store and object semantics: create/update/delete as prepare + commit,
  metadata (uid, resourceVersion, generation, generateName), status isolation, finalizers,
  namespaces, CRD registration, field and schema admission hooks.
- ``rest``: routing, discovery, verbs, content negotiation (JSON, YAML, protobuf bodies, Tables),
  patches, server-side apply, scale, dry runs, warnings, the order of admission.
- ``watch``: watch streams (resourceVersion replay, 410 Expired, bookmarks, selector transitions).
- ``openapi``: OpenAPI v3 and v2 from the upstream schemas (kubernetes-validate) and CRD schemas.
- ``protobuf``: the protobuf wire format: request bodies of core kinds, the v2 document.
- ``crdschema`` and ``cel``: structural schema (unknown fields, pruning, defaults, validation with
  the real server's messages, ratcheting) and ``x-kubernetes-validations`` with cel-python.
- ``admission``: Mutating/ValidatingWebhookConfigurations called over HTTPS.
- ``limits``: request (3 MiB), ConfigMap/Secret data (1 MiB) and object (1.5 MiB) limits.
- ``gc``: the asynchronous garbage collector (background, foreground, orphan, dangling owners).
- ``selectors``, ``patches``, ``faults``, ``resources``, ``common``: selectors and JSONPath,
  merge/strategic/JSON patch and SSA helpers, fault injection, built-in kinds, errors.

What the original shim fixed in raw kmock 0.8 (numbered as in the test-stack reference; one test
each in tests/apiserver/test_defects.py, a strict xfail against raw kmock):

1. POSTing (or applying/patching) a CRD registers its resource for every served version (names,
   scope, verbs, status and scale subresources, printer columns, the schema); Established and
   NamesAccepted conditions; deleting it removes the resource and its objects.
2. ``GET /api/v1`` is an APIResourceList with ``groupVersion: v1``.
3. ``/api/v1/namespaces[/<name>[/status]]`` is the Namespace resource.
4. Lists carry ``kind``, ``apiVersion`` and a numeric ``metadata.resourceVersion``.
5. Objects get their namespace from the URL, a uid, a global resourceVersion, creationTimestamp,
   ``generation`` (+1 when anything outside metadata and status changes) and ``generateName``.
6. Watches are ``application/json`` chunked, one event per line.
7. No watch race (snapshot and subscription in one step); ``resourceVersion`` replays from an
   event log (too old: ERROR 410); ``timeoutSeconds`` ends the stream.
8. A failed JSON-patch ``test`` op (any invalid JSON patch) is 422.
9. Trailing slashes, PUT (409 on a stale resourceVersion), ``?dryRun=All``, label and field
   selectors on list, watch and deletecollection.

Simplifications (deliberate; docs/how-to/develop-locally.md lists them for users): no controllers,
scheduler or kubelet; no authentication or RBAC; no CRD version conversion (versions share one
storage); no paging; field ownership (ssa.py) without the 10-Update-manager cap or version
conversion of managedFields; protobuf bodies for the kinds in
``protobuf.KINDS`` only; schema validation runs before mutating webhooks; no webhook
``matchConditions``; Endpoints are written by whoever plays the controller.

Scale: kmock records every request and evaluates its DSL over that history; here the history is a
``deque(maxlen=history_limit)`` (default 64, 0 disables it), the DSL is consulted only when a test
added reactions (``emulator['get /x'] << ...``), and objects live in a per-resource index. Stored
objects are never mutated in place (each write stores a new dict), so watch events can share them.

Fault injection: ``emulator.faults.add(verb=..., resource=..., status=..., count=N)`` in-process,
or ``POST /_specdeploy/faults`` with the same JSON, plus ``POST /_specdeploy/watches/drop`` and
``/_specdeploy/watches/expire``, and ``GET /_specdeploy/stats``. A fault with ``agent`` matches one
client's User-Agent only (``verb="*", action="drop"``: that client is partitioned from the server;
``DELETE /_specdeploy/faults {"agent": ...}`` heals it). ``emulator.writes`` and ``GET
/_specdeploy/writes`` list every write request with its User-Agent, start and end (wall clock) and
status: the leader-election tests prove from it that no two operator replicas wrote at once.

kmock private names relied on (hence ``kmock==0.8`` exactly in pyproject.toml), all in server.py:
``kmock._internal.apps.RawHandler._handle`` (test-defined reactions), ``kmock._internal.dsl.Root.
_requests`` (replaced by a bounded deque) and ``Root._payloads``; ``KubernetesEmulator.
__attrs_post_init__`` is deliberately not called; ``attrs.define`` slotted classes.

Entry points: ``await start(port=0)`` -> ``ApiServer`` (``.url``, ``.port``, ``.emulator``,
``await .stop()``); ``serve_in_thread()`` -> ``ThreadedApiServer`` for synchronous tests;
``write_kubeconfig(path, url)``; ``main(argv)`` for ``specdeploy dev apiserver --kubeconfig PATH
[--port N]`` (also ``python -m specdeploy_dev.apiserver``).
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
