"""The embedded API server's ``pods/log`` subresource: proxied to the kubelet of the pod's node.

As on a real cluster, the API server does not keep logs: ``GET .../pods/NAME/log`` finds the
pod's ``spec.nodeName``, that Node's ``status.addresses`` (InternalIP first) and
``status.daemonEndpoints.kubeletEndpoint.Port``, and streams
``http://ADDRESS:PORT/containerLogs/NAMESPACE/NAME/CONTAINER?<query>`` back (``container``
defaulted when the pod has one container; ``previous``, ``follow``, ``tailLines``,
``limitBytes``, ``timestamps``, ``sinceSeconds`` passed through). The kubelet side is
``specdeploy_dev.kubelet``. Only loopback addresses are proxied to: the stand-in never
connects off the machine. Errors are Kubernetes ``Status`` documents.

Kept apart from ``apiserver`` on purpose: the API server calls :func:`proxy` from one place.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import aiohttp
import aiohttp.web

PASSED = ("previous", "follow", "tailLines", "limitBytes", "timestamps", "sinceSeconds", "sinceTime")


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return aiohttp.web.Response(body=json.dumps(body).encode(), status=code, content_type="application/json")


def kubelet_url(pod: dict[str, Any], node: dict[str, Any] | None, container: str | None) -> tuple[str | None, str]:
    """(URL of the kubelet's log endpoint, or None, and the error message when None). Pure."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name")
    containers = [c.get("name") for c in spec.get("containers") or []]
    inits = [c.get("name") for c in spec.get("initContainers") or []]
    if not container:
        if len(containers) != 1:
            msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
            if inits:
                msg += f" or one of the init containers: [{' '.join(inits)}]"
            return None, msg
        container = containers[0]
    if container not in containers + inits:
        return None, f"container {container} is not valid for pod {name}"
    node_name = spec.get("nodeName")
    if not node_name:
        return None, f"pod {name} does not have a host assigned"
    if node is None:
        return None, f"node {node_name} of pod {name} not found"
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    addresses = sorted(status.get("addresses") or [], key=lambda a: a.get("type") != "InternalIP")
    address = next((a.get("address") for a in addresses if a.get("type") in ("InternalIP", "Hostname")), None)
    try:
        loopback = address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not port or not loopback:
        return None, f"node {node_name} has no loopback kubelet endpoint (the stand-in proxies to loopback only)"
    host = f"[{address}]" if ":" in str(address) else address
    return f"http://{host}:{int(port)}/containerLogs/{meta.get('namespace')}/{name}/{container}", ""


async def proxy(raw: aiohttp.web.BaseRequest, pod: dict[str, Any], node: dict[str, Any] | None
                ) -> aiohttp.web.StreamResponse:
    """Answer ``GET pods/NAME/log`` for ``pod`` by streaming its kubelet's answer back."""
    url, error = kubelet_url(pod, node, raw.query.get("container"))
    if url is None:
        return _status(400, "BadRequest", error)
    query = {k: raw.query[k] for k in PASSED if k in raw.query}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    resp = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url, params=query) as upstream:
                if upstream.status != 200:
                    text = (await upstream.text()).strip()
                    return _status(upstream.status, "BadRequest" if upstream.status == 400 else "NotFound", text)
                await resp.prepare(raw)  # type: ignore[arg-type]
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
    except (aiohttp.ClientError, ConnectionError) as e:
        if not resp.prepared:
            node_name = (pod.get("spec") or {}).get("nodeName")
            return _status(502, "InternalError", f"cannot reach the kubelet of node {node_name}: {e}")
    if resp.prepared:
        await resp.write_eof()
    return resp
