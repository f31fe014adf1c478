"""`specdeploy rollout status|promote|abort|retry NAME`: a SpeculativeDeployment's canary rollout.

    specdeploy rollout status NAME [-n NS] [--kubeconfig PATH] [--context NAME] [-o text|json]
    specdeploy rollout promote|abort|retry NAME [-n NS] [--kubeconfig PATH] [--context NAME] [-o text|json]

Modelled on ``kubectl argo rollouts get|promote|abort|retry``. ``status`` reads the CR and prints
status.rollout (ROLLOUT.md's shape, read as plain dicts): phase, the stable, canary and refused
revisions, the Rollout condition, the decision with its reason and message, the probe, and the
analysis table of both tracks in aligned columns. ``promote``/``abort``/``retry`` ask the operator to
act: a merge patch sets the CR's ``specdeploy.io/rollout`` annotation to ``<action>@<unix-ms>`` (a
new value each time; the operator records the value it acted on in status.rollout.requestHandled, so
one request is acted on once), guarded by the CR's resourceVersion so the check that there is
something to act on holds for the object patched.

The cluster: the kubeconfig (``--kubeconfig``, else KUBECONFIG, else ~/.kube/config; ``--context``,
else its current context), or the in-cluster service account when there is no kubeconfig; the
namespace defaults to the context's (``default`` without one), as kubectl's does.

Exit: 0 done; 2 unusable input (no such object, no canary rollout configured, nothing to promote,
abort or retry, no cluster): one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from typing import Any

from .common import OUTPUTS, UsageError, epilog, need_action, print_doc

from ..core.rollout import canary as ro

ACTIONS = ro.REQUESTS  # promote, abort, retry
CANARY = ro.CANARY
# The phases in which a canary is under way (promote and abort act on it), and the one retry acts in.
RUNNING_PHASES = (ro.PHASE_PROGRESSING, ro.PHASE_ANALYZING)
ROLLED_BACK = ro.PHASE_ROLLED_BACK
REQUEST_TIMEOUT_S = 30
# The analysis table: (header, status.rollout.analysis row key, format)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("TRACK", "track", "s"), ("REVISION", "revision", "s"), ("PODS", "pods", "d"), ("DRAFTS", "drafts", "d"),
    ("TAU", "tau", ".2f"), ("TOKENS/S/REQ", "tokensPerSecondPerRequest", ".2f"), ("REQUESTS", "requests", "d"),
    ("FAILED", "failedRequests", "d"), ("ERROR RATE", "errorRate", "%"),
)


class RolloutError(UsageError):
    """Unusable input: one line, exit 2."""


# ----------------------------------------------------------------- the cluster


class Cluster:
    """The few API calls the command makes, over the official client's ApiClient (synchronous)."""

    def __init__(self, kubeconfig: str | None, context: str | None):
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        self.cfg = k8s.Configuration()
        self.namespace = "default"
        try:
            k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=self.cfg)
            contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
            self.namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        except (k8s_config.ConfigException, OSError, ValueError, TypeError) as e:
            if kubeconfig or context:
                raise RolloutError(f"kubeconfig{f' {kubeconfig}' if kubeconfig else ''}"
                                   f"{f' context {context!r}' if context else ''}: {e}") from None
            try:
                k8s_config.load_incluster_config(client_configuration=self.cfg)
            except k8s_config.ConfigException:
                raise RolloutError(f"no cluster: no usable kubeconfig ({e}) and not in a pod; give --kubeconfig "
                                   "or set KUBECONFIG") from None
            try:
                with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as fh:
                    self.namespace = fh.read().strip() or "default"
            except OSError:
                pass
        self.api = k8s.ApiClient(configuration=self.cfg)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, dict]:
        """(HTTP status, JSON body); a connection failure is a RolloutError."""
        from kubernetes.client.rest import ApiException

        headers = {"Content-Type": content_type, "Accept": "application/json"}
        try:
            m, url, hdrs, data, _ = self.api.param_serialize(method, path, header_params=headers, body=body,
                                                             auth_settings=["BearerToken"])
            resp = self.api.call_api(m, url, header_params=hdrs, body=data, _request_timeout=REQUEST_TIMEOUT_S)
            resp.read()
            status, raw = resp.status, resp.data
        except ApiException as e:
            status, raw = e.status or 0, e.body or b""
        except Exception as e:  # noqa: BLE001 - urllib3's connection and TLS errors: one line, no traceback
            raise RolloutError(f"cannot reach the API server at {self.cfg.host}: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"message": raw[:200]}
        return status, doc if isinstance(doc, dict) else {}


def _path(namespace: str, name: str) -> str:
    from .. import PLURAL
    from ..core.names import GROUP_VERSION

    return f"/apis/{GROUP_VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _where(namespace: str, name: str) -> str:
    return f"SpeculativeDeployment {namespace}/{name}"


def _check(status: int, doc: dict, namespace: str, name: str, verb: str) -> None:
    if status < 400:
        return
    if status == 404:
        raise RolloutError(f"no SpeculativeDeployment {name} in namespace {namespace}")
    if status == 409:
        raise RolloutError(f"{_where(namespace, name)} changed while this command ran; run it again")
    message = doc.get("message") or doc.get("reason") or ""
    raise RolloutError(f"{verb} {_where(namespace, name)}: {status} {message}".rstrip())


def get_deployment(cluster: Cluster, namespace: str, name: str) -> dict:
    status, doc = cluster.request("GET", _path(namespace, name))
    _check(status, doc, namespace, name, "get")
    return doc


def patch_annotation(cluster: Cluster, obj: dict, value: str) -> dict:
    from ..core.names import ROLLOUT_ANNOTATION

    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    body = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {ROLLOUT_ANNOTATION: value}}}
    if not body["metadata"]["resourceVersion"]:
        del body["metadata"]["resourceVersion"]
    status, doc = cluster.request("PATCH", _path(namespace, name), body, "application/merge-patch+json")
    _check(status, doc, namespace, name, "patch")
    return doc


# ----------------------------------------------------------------- pure: what the object says


def strategy_of(obj: dict) -> str:
    rollout = (obj.get("spec") or {}).get("rollout")
    return ((rollout or {}).get("strategy") if isinstance(rollout, dict) else None) or ro.ROLLING_UPDATE


COUNTS = ("pods", "drafts", "requests", "failedRequests")  # analysis row fields that count things


def rollout_status(obj: dict) -> dict:
    """status.rollout, with the analysis rows' counts as integers (a status an older operator wrote holds 120.0)."""
    r = (obj.get("status") or {}).get("rollout")
    if not isinstance(r, dict):
        return {}
    rows = r.get("analysis")
    if isinstance(rows, list):
        r = {**r, "analysis": [{k: int(v) if k in COUNTS and isinstance(v, float) and v.is_integer() else v
                                for k, v in row.items()} if isinstance(row, dict) else row for row in rows]}
    return r


def rollout_condition(obj: dict) -> dict | None:
    from ..core.names import ROLLOUT

    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ROLLOUT:
            return c
    return None


def need_canary(obj: dict) -> None:
    meta = obj.get("metadata") or {}
    strategy = strategy_of(obj)
    if strategy != CANARY:
        raise RolloutError(f"{_where(meta.get('namespace'), meta.get('name'))} has no canary rollout configured "
                           f"(spec.rollout.strategy is {strategy}): set spec.rollout.strategy: Canary")


def check_action(obj: dict, action: str) -> str:
    """Why ``action`` has something to act on (a sentence for the output); RolloutError when it has not."""
    need_canary(obj)
    meta = obj.get("metadata") or {}
    r = rollout_status(obj)
    phase = r.get("phase")
    where = _where(meta.get("namespace"), meta.get("name"))
    if not r:
        raise RolloutError(f"nothing to {action}: {where} reports no rollout yet (status.rollout is empty: the "
                           "operator has not reconciled it since spec.rollout was set)")
    if action in ("promote", "abort"):
        if phase not in RUNNING_PHASES or not r.get("canaryRevision"):
            what = {"Stable": "no canary under way", "Promoting": "already promoting",
                    ROLLED_BACK: f"revision {r.get('refusedRevision') or '?'} was rolled back; "
                                 f"`specdeploy rollout retry {meta.get('name')}` analyses it again"}.get(
                phase, "no canary under way")
            raise RolloutError(f"nothing to {action}: {where} is in phase {phase or '-'} ({what})")
        return f"canary {r['canaryRevision']} ({phase})"
    if phase != ROLLED_BACK or not r.get("refusedRevision"):
        raise RolloutError(f"nothing to retry: {where} is in phase {phase or '-'} (no refused revision to "
                           "analyse again)")
    return f"refused revision {r['refusedRevision']}"


def request_value(action: str, now_s: float | None = None) -> str:
    """The annotation value: ``<action>@<unix-ms>``, unique per request."""
    return f"{action}@{int((time.time() if now_s is None else now_s) * 1000)}"


def pending_request(obj: dict) -> str | None:
    """The annotation's request the operator has not acted on yet (None: none, or handled)."""
    from ..core.names import ROLLOUT_ANNOTATION

    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ROLLOUT_ANNOTATION)
    if not value or value == rollout_status(obj).get("requestHandled"):
        return None
    return value


def _cell(value: Any, fmt: str) -> str:
    if value is None or value == "" or isinstance(value, bool):
        return "-"
    if fmt == "s":
        return str(value)
    if not isinstance(value, (int, float)):
        return str(value)
    if fmt == "d":
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    if fmt == "%":
        return f"{value * 100:.2f}%"
    return format(value, fmt)


def format_table(rows: list[dict]) -> str:
    """The analysis rows in aligned columns (two spaces apart, no trailing blanks)."""
    table = [[h for h, _k, _f in COLUMNS]]
    for row in rows:
        if isinstance(row, dict):
            table.append([_cell(row.get(k), f) for _h, k, f in COLUMNS])
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _age(text: Any, now: datetime) -> str:
    t = _parse_time(text)
    if t is None:
        return ""
    s = max(0, int((now - t).total_seconds()))
    return f"{s // 3600}h{s % 3600 // 60}m" if s >= 3600 else f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"


def format_status(obj: dict, now: datetime | None = None) -> str:
    """``specdeploy rollout status``'s text: a field list, then the analysis table."""
    now = now or datetime.now(timezone.utc)
    meta = obj.get("metadata") or {}
    r = rollout_status(obj)
    lines: list[tuple[str, str]] = [("Name", meta.get("name") or ""), ("Namespace", meta.get("namespace") or ""),
                                    ("Strategy", strategy_of(obj)),
                                    ("Phase", r.get("phase") or "- (no rollout reported yet)"),
                                    ("Stable", r.get("stableRevision") or "-")]
    canary = r.get("canaryRevision")
    if canary:
        started = r.get("startedAt")
        age = _age(started, now)
        canary += f"  (started {started}, {age} ago)" if started and age else f"  (started {started})" if started else ""
    lines += [("Canary", canary or "-"), ("Refused", r.get("refusedRevision") or "-")]
    cond = rollout_condition(obj)
    if cond:
        text = f"{cond.get('type')}={cond.get('status', '?')} {cond.get('reason', '')}".rstrip()
        if cond.get("message"):
            text += f": {cond['message']}"
        lines.append(("Condition", text))
    decision = r.get("decision")
    if isinstance(decision, dict) and decision:
        text = f"{decision.get('result', '?')} {decision.get('reason', '')}".rstrip()
        if decision.get("at"):
            text += f" at {decision['at']}"
        lines.append(("Decision", text))
        if decision.get("message"):
            lines.append(("Message", str(decision["message"])))
    probe = r.get("probe")
    if isinstance(probe, dict) and probe:
        text = f"{probe.get('identical', '?')}/{probe.get('prompts', '?')} prompts identical"
        if probe.get("message"):  # the operator's message may start with the same count: said once
            msg = str(probe["message"])
            text = msg if msg.startswith(text) else f"{text}: {msg}"
        lines.append(("Probe", text))
    pending = pending_request(obj)
    if pending:
        lines.append(("Request", f"{pending} (not acted on yet)"))
    elif r.get("requestHandled"):
        lines.append(("Request", f"{r['requestHandled']} (acted on)"))
    width = max(len(k) for k, _v in lines) + 2
    out = [f"{k + ':':<{width}}{v}".rstrip() for k, v in lines]
    rows = r.get("analysis") or []
    out.append("")
    out.append(format_table(rows) if rows else "Analysis: none yet (the canary's pods have not been judged)")
    return "\n".join(out)


def status_doc(obj: dict) -> dict:
    meta = obj.get("metadata") or {}
    return {"name": meta.get("name"), "namespace": meta.get("namespace"), "strategy": strategy_of(obj),
            "rollout": rollout_status(obj), "condition": rollout_condition(obj), "pendingRequest": pending_request(obj)}


# ----------------------------------------------------------------- commands


def _target(args: argparse.Namespace) -> tuple[Cluster, str]:
    cluster = Cluster(args.kubeconfig, args.context)
    return cluster, args.namespace or cluster.namespace


def cmd_status(args: argparse.Namespace) -> int:
    cluster, namespace = _target(args)
    obj = get_deployment(cluster, namespace, args.name)
    need_canary(obj)
    if args.output in ("json", "yaml"):
        print_doc({"ok": True, **status_doc(obj)}, args.output)
    else:
        print(format_status(obj))
    return 0


def cmd_action(args: argparse.Namespace) -> int:
    from ..core.names import ROLLOUT_ANNOTATION

    action = args.rollout_command
    cluster, namespace = _target(args)
    obj = get_deployment(cluster, namespace, args.name)
    subject = check_action(obj, action)
    replaced = pending_request(obj)
    value = request_value(action)
    patch_annotation(cluster, obj, value)
    if args.output in ("json", "yaml"):
        print_doc({"ok": True, "action": action, "name": args.name, "namespace": namespace,
                   "annotation": {ROLLOUT_ANNOTATION: value}, "replaced": replaced}, args.output)
        return 0
    done = {"promote": "promote requested", "abort": "abort requested", "retry": "retry requested"}[action]
    print(f"{done} for {_where(namespace, args.name)}: {subject}")
    print(f"set {ROLLOUT_ANNOTATION}={value}" + (f" (replaces {replaced}, not acted on yet)" if replaced else ""))
    print(f"the operator acts on it at its next reconcile; watch: specdeploy rollout status {args.name} -n {namespace}")
    return 0


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="the SpeculativeDeployment")
    p.add_argument("-n", "--namespace", default=None, help="its namespace (default: the kubeconfig context's)")
    p.add_argument("--kubeconfig", default=None, metavar="PATH",
                   help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config; in a pod: its service account)")
    p.add_argument("--context", default=None, metavar="NAME", help="kubeconfig context (default: its current one)")
    p.add_argument("-o", "--output", choices=OUTPUTS, default="text")


def add_parser(sub) -> None:
    from ..core.names import ROLLOUT_ANNOTATION

    r = sub.add_parser("rollout", help="a SpeculativeDeployment's canary rollout: status, promote, abort, retry",
                       description="A SpeculativeDeployment's canary rollout (spec.rollout.strategy: Canary), as "
                                   "kubectl argo rollouts does it: print its analysis, or ask the operator to promote "
                                   "the canary now, abort it, or analyse a refused revision again.",
                       epilog=epilog(["specdeploy rollout status qwen3 -n llm", "specdeploy rollout abort qwen3 -n llm"],
                                     None))
    rsub = r.add_subparsers(dest="rollout_command", metavar="ACTION")
    r.set_defaults(func=need_action(r, "an action: status, promote, abort, retry"))
    s = rsub.add_parser(
        "status", help="print the phase, revisions, decision and analysis table",
        description="Print a SpeculativeDeployment's rollout from its status: phase, the stable, canary and refused "
                    "revisions, the Rollout condition, the last decision (result, reason, message with the numbers), "
                    "the probe, a request not acted on yet, and the analysis table (per track: pods, drafts, tau, "
                    "output tokens/s per running request, requests, failed requests, error rate).",
        epilog=epilog(["specdeploy rollout status qwen3 -n llm", "specdeploy rollout status qwen3 -o json",
                       "specdeploy rollout status qwen3 --kubeconfig ~/.kube/prod --context prod-eu"],
                      "printed", json_errors=True))
    _cluster_args(s)
    s.set_defaults(func=cmd_status)
    helps = {
        "promote": ("promote the canary now, without waiting for the analysis",
                    "Ask the operator to promote the canary under analysis now (phase Progressing or Analyzing): the "
                    "stable Deployment rolls to the canary's revision, then the canary is removed."),
        "abort": ("roll the canary back now",
                  "Ask the operator to roll the canary under analysis back now (reason Aborted): the canary is "
                  "removed, the stable keeps serving, the revision is refused until the spec changes or a retry."),
        "retry": ("analyse the refused revision again",
                  "Ask the operator to start a new canary of the revision it rolled back (phase RolledBack), "
                  "without a spec change."),
    }
    for action in ACTIONS:
        short, long = helps[action]
        a = rsub.add_parser(
            action, help=short,
            description=f"{long} Sets the annotation {ROLLOUT_ANNOTATION} to {action}@<unix-ms> with a merge patch "
                        "(the operator acts on each value once and records it in status.rollout.requestHandled).",
            epilog=epilog([f"specdeploy rollout {action} qwen3 -n llm"],
                          "the request was written", json_errors=True))
        _cluster_args(a)
        a.set_defaults(func=cmd_action)
