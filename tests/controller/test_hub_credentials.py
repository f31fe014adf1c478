"""Issue 24, item 4: hub resolutions are cached per credential (docs/concepts/security.md, "Hub credentials").

Against the hub stand-in through the real huggingface_hub client: what one tenant's token fetched (in the
resolver's memory or in the on-disk cache) is never another credential's answer; a CR without access to a
private model gets ``ModelNotFound`` exactly as before anyone resolved it, also with a fresh resolver (an
operator restart) over the same cache directory. Through the operator: e2e/test_e2e_hub.py."""

from __future__ import annotations

import asyncio
import base64
import functools
import json

import pytest

pytest.importorskip("huggingface_hub")

from specdeploy.api.validation import validate  # noqa: E402
from specdeploy.controller.hub import ANONYMOUS, HubResolutionError, credential_id, fetch_config  # noqa: E402
from specdeploy.controller.resolve import ResolutionError, Resolver  # noqa: E402
from specdeploy.controller.webhooks import OperatorConfigs  # noqa: E402
from specdeploy.controller.admission import ConfigsUnavailable  # noqa: E402
from specdeploy_dev.hubserver import HubRepo, commit_sha, start_in_thread  # noqa: E402

PRIVATE = "acme/private-model"
PUBLIC = "org/public-model"
TOKEN = "hf_tenant_a_token"
OTHER = "hf_tenant_c_token"  # valid, without access to PRIVATE
CFG = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096}
PINNED = commit_sha(PRIVATE, "main")


@pytest.fixture
def hub():
    repos = [HubRepo(PRIVATE, {"config.json": json.dumps(CFG).encode()}, token=TOKEN),
             HubRepo(PUBLIC, {"config.json": json.dumps(CFG).encode()}),
             HubRepo("acme/other-private", {"config.json": b"{}"}, token=OTHER)]
    with start_in_thread(repos) as url:
        yield url


class Secrets:
    """The one API read the resolver makes for a hub model: the token Secret."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict] = {}
        self.reads = 0

    def put(self, ns: str, name: str, token: str, key: str = "token") -> None:
        self.secrets[(ns, name)] = {"data": {key: base64.b64encode(token.encode()).decode()}}

    async def get(self, kind: str, ns: str, name: str):
        assert kind == "Secret", kind
        self.reads += 1
        return self.secrets.get((ns, name))


def cr(ns: str, model: str, revision: str | None = None, secret: str | None = None):
    body = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "x", "namespace": ns},
            "spec": {"engine": {"name": "vllm", "version": "0.33.0"}, "gpu": {"type": "b300", "count": 1},
                     "target": {"model": PUBLIC}, "drafter": {"model": model}}}
    if revision:
        body["spec"]["drafter"]["revision"] = revision
    if secret:
        body["spec"]["drafter"]["tokenSecretRef"] = {"name": secret}
    parsed, problems = validate(body)
    assert parsed is not None, problems
    parsed.metadata.namespace = ns
    return parsed


def resolver(kube, hub, cache) -> Resolver:
    return Resolver(kube, hub_fetch=functools.partial(fetch_config, cache_dir=str(cache), timeout=5.0),
                    hub_endpoint=hub)


def resolve(r: Resolver, obj):
    from specdeploy.core.render import Admitted

    # past the tenancy policy (these tests are about the resolver's credential cache, not the policy's lists)
    return asyncio.run(r.resolve(Admitted(obj, None), "drafter"))


def refusal(r: Resolver, obj) -> ResolutionError:
    with pytest.raises(ResolutionError) as info:
        resolve(r, obj)
    return info.value


def test_credential_id_names_no_token():
    assert credential_id(None) == credential_id("") == ANONYMOUS
    a, b = credential_id(TOKEN), credential_id(OTHER)
    assert a != b and a.startswith("token-") and TOKEN not in a and len(a) == len("token-") + 32
    assert credential_id(TOKEN) == a  # stable across processes: the on-disk cache is found again


def test_on_disk_pinned_commit_is_not_served_to_another_credential(hub, tmp_path):
    """The pinned-commit shortcut answers from the cache of the same credential only."""
    cache = str(tmp_path / "hub-cache")
    got = fetch_config(PRIVATE, PINNED, token=TOKEN, endpoint=hub, cache_dir=cache)
    assert got.commit == PINNED
    hub.server.reset_counts()
    assert fetch_config(PRIVATE, PINNED, token=TOKEN, endpoint=hub, cache_dir=cache) == got
    assert hub.server.count() == 0  # the token's own cache: no request, as before
    for token in (None, OTHER):
        with pytest.raises(HubResolutionError) as info:
            fetch_config(PRIVATE, PINNED, token=token, endpoint=hub, cache_dir=cache, timeout=5.0)
        assert info.value.reason == "ModelNotFound", info.value
    assert hub.server.count("HEAD") == 2  # each asked the hub


def test_tenant_without_token_gets_model_not_found_after_another_resolved_it(hub, tmp_path):
    kube = Secrets()
    kube.put("tenant-a", "hub-token", TOKEN)
    kube.put("tenant-c", "hub-token", OTHER)
    r = resolver(kube, hub, tmp_path / "cache")
    # before anyone resolved it
    before = {(ns, rev, sec): refusal(r, cr(ns, PRIVATE, rev, sec)).reason
              for ns, sec in (("tenant-b", None), ("tenant-c", "hub-token")) for rev in (None, PINNED)}
    assert set(before.values()) == {"ModelNotFound"}
    for rev in (None, PINNED):
        assert resolve(r, cr("tenant-a", PRIVATE, rev, "hub-token")).commit == PINNED
    # after: the same answers, in memory and on disk
    after = {(ns, rev, sec): refusal(r, cr(ns, PRIVATE, rev, sec)).reason for ns, rev, sec in before}
    assert after == before
    # across a restart: a fresh resolver over the same on-disk cache
    fresh = resolver(kube, hub, tmp_path / "cache")
    assert {(ns, rev, sec): refusal(fresh, cr(ns, PRIVATE, rev, sec)).reason for ns, rev, sec in before} == before
    assert resolve(fresh, cr("tenant-a", PRIVATE, PINNED, "hub-token")).commit == PINNED


def test_cached_entry_is_used_by_its_own_credential_only(hub, tmp_path):
    kube = Secrets()
    kube.put("tenant-a", "hub-token", TOKEN)
    r = resolver(kube, hub, tmp_path / "cache")
    first = resolve(r, cr("tenant-a", PRIVATE, None, "hub-token"))
    hub.server.reset_counts()
    assert resolve(r, cr("tenant-a", PRIVATE, None, "hub-token")) == first
    assert hub.server.count() == 0  # the token's own entry: no request
    # the Secret now holds another token: that one's access decides, not the entry the old one fetched
    kube.put("tenant-a", "hub-token", OTHER)
    assert refusal(r, cr("tenant-a", PRIVATE, None, "hub-token")).reason == "ModelNotFound"
    # a public model resolved anonymously is cached for anonymous callers
    pub = resolve(r, cr("tenant-b", PUBLIC))
    hub.server.reset_counts()
    assert resolve(r, cr("tenant-z", PUBLIC)) == pub and hub.server.count() == 0


def test_webhook_sees_the_entry_of_the_namespaces_reference_only(hub, tmp_path):
    kube = Secrets()
    kube.put("tenant-a", "hub-token", TOKEN)
    r = resolver(kube, hub, tmp_path / "cache")
    resolve(r, cr("tenant-a", PRIVATE, None, "hub-token"))
    lookup = OperatorConfigs(None, r)

    def doc(ns, obj):
        return asyncio.run(lookup._one(ns, obj.spec.drafter, "drafter", False))[0]

    assert doc("tenant-a", cr("tenant-a", PRIVATE, None, "hub-token")) == CFG
    for ns, secret in (("tenant-b", None), ("tenant-b", "hub-token"), ("tenant-a", "other-secret")):
        with pytest.raises(ConfigsUnavailable) as info:
            doc(ns, cr(ns, PRIVATE, None, secret))
        assert "has not been fetched from the hub yet" in str(info.value)
