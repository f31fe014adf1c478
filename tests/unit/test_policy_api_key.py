"""Issue 37 item 6, hole 8: spec.engine.apiKey names a Secret AND a key the tenancy policy allows.

The Secret must be a hub token Secret (hub.tokenSecrets, PolicyApiKeySecretNotAllowed); its key must be one of
policy.allowedApiKeySecretKeys / --allowed-api-key-secret-key (default `token`, the field's default key;
PolicyApiKeySecretKeyNotAllowed). The acceptance monitor asks the same rule (``api_key_allowed``) before it reads
the Secret for the canary probe (tests/controller/test_monitor_trust.py)."""

from __future__ import annotations

import argparse

import pytest

from specdeploy.core.policy import DEFAULT_API_KEY_SECRET_KEYS, TenancyPolicy, api_key_allowed, check_policy

from test_policy import codes, cr


def keyed(key: str | None = None, name: str = "engine-key"):
    ref = {"name": name} if key is None else {"name": name, "key": key}
    return cr(engine={"name": "vllm", "version": "0.33.0", "apiKey": {"secretKeyRef": ref}}).spec


ALLOWED = TenancyPolicy(token_secrets=("engine-key",), api_key_secret_keys=("api-key",))


def test_an_allowed_secret_and_key_pass():
    assert check_policy(keyed("api-key"), ALLOWED) == []
    assert api_key_allowed(ALLOWED, "engine-key", "api-key")


def test_another_key_of_an_allowed_secret_is_refused():
    got = check_policy(keyed("aws-secret-access-key"), ALLOWED)
    assert codes(got) == [("PolicyApiKeySecretKeyNotAllowed", "spec.engine.apiKey.secretKeyRef.key")]
    msg = got[0].message
    assert "'aws-secret-access-key'" in msg and "api-key" in msg
    assert "policy.allowedApiKeySecretKeys" in msg and "--allowed-api-key-secret-key" in msg
    assert not api_key_allowed(ALLOWED, "engine-key", "aws-secret-access-key")


def test_the_hub_token_keys_do_not_allow_an_api_key_key():
    # a separate list: a key allowed as HF_TOKEN is not therefore an engine API key
    p = TenancyPolicy(token_secrets=("engine-key",), token_secret_keys=("password",), api_key_secret_keys=("api-key",))
    assert codes(check_policy(keyed("password"), p)) == [("PolicyApiKeySecretKeyNotAllowed",
                                                         "spec.engine.apiKey.secretKeyRef.key")]


def test_the_default_allows_the_fields_default_key_only():
    p = TenancyPolicy(token_secrets=("engine-key",))
    assert p.api_key_secret_keys == DEFAULT_API_KEY_SECRET_KEYS == ("token",)
    assert check_policy(keyed(None), p) == []  # secretKeyRef.key defaults to token
    assert codes(check_policy(keyed("key"), p)) == [("PolicyApiKeySecretKeyNotAllowed",
                                                    "spec.engine.apiKey.secretKeyRef.key")]


def test_an_unlisted_secret_is_refused_by_name_first():
    got = check_policy(keyed("aws-secret-access-key", name="db"), ALLOWED)
    assert codes(got) == [("PolicyApiKeySecretNotAllowed", "spec.engine.apiKey.secretKeyRef.name")]
    assert not api_key_allowed(ALLOWED, "db", "api-key")


def test_no_key_allowed_refuses_every_api_key():
    p = TenancyPolicy(token_secrets=("engine-key",), api_key_secret_keys=())
    assert codes(check_policy(keyed(None), p)) == [("PolicyApiKeySecretKeyNotAllowed",
                                                   "spec.engine.apiKey.secretKeyRef.key")]


def _parse(*argv: str) -> TenancyPolicy:
    from specdeploy.cli.common import add_policy_args, policy_args

    p = argparse.ArgumentParser()
    add_policy_args(p)
    return policy_args(p.parse_args(list(argv)))


def test_the_operator_flag_builds_the_list_and_round_trips_the_env():
    assert _parse().api_key_secret_keys == ("token",)
    p = _parse("--allowed-api-key-secret-key=api-key", "--allowed-api-key-secret-key", "key")
    assert p.api_key_secret_keys == ("api-key", "key")
    assert TenancyPolicy.from_env(p.to_env()) == p
    assert _parse("--allowed-api-key-secret-key=").api_key_secret_keys == ()  # '' alone: none
    from specdeploy.cli.common import UsageError

    with pytest.raises(UsageError):
        _parse("--allowed-api-key-secret-key=a b")
