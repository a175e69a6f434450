"""The state policy shows its store URL without the password, userinfo or secret values."""

from __future__ import annotations

import pytest

from resilient_session._observe.redact import REDACTED
from resilient_session.config import StatePolicy, load
from resilient_session.errors import ConfigError

STORE_URL = "redis://user-S3cret:S3cretPW@127.0.0.1:6399/0?password=tok-S3cret"
SHOWN = "redis://127.0.0.1:6399/0?password=REDACTED"
SENTINEL_PASSWORD = "S3cretPW"  # noqa: S105 - planted, to be found nowhere


def test_repr_str_and_rich_repr_hide_the_store_secrets():
    """repr, str, an f-string and rich's __rich_repr__ all show the URL as redacted."""
    policy = StatePolicy(backend="redis", url=STORE_URL)
    assert dict(policy.__rich_repr__())["url"] == SHOWN
    assert dict(policy.__rich_repr__())["backend"] == "redis"
    assert repr(policy) == (
        f"StatePolicy(backend='redis', url='{SHOWN}', key_prefix='resilient-session:', "
        "timeout_ms=20, sync_interval_ms=100, mode='single', sentinels=(), service_name=None, "
        "sentinel_password=None, ssl_ca_certs=None, ssl_certfile=None, ssl_keyfile=None, "
        "ssl_cert_reqs='required', ssl_check_hostname=True)"
    )
    assert str(policy) == f"{policy}" == repr(policy)
    assert policy.url == STORE_URL


def test_a_loaded_config_shows_the_redacted_store_url():
    """The Config holding the policy shows it through the policy's repr."""
    config = load({"state": {"url": STORE_URL.replace("user-S3cret", "")}})
    assert f"url='{SHOWN}'" in repr(config)
    assert "S3cret" not in f"{config}"
    assert config.state.url.startswith("redis://:S3cretPW@")


def test_the_sentinels_password_is_shown_as_redacted():
    """sentinel_password shows as REDACTED in repr, str and rich's repr; an error about its
    value names the key without the value."""
    policy = StatePolicy(
        backend="redis",
        mode="sentinel",
        sentinels=(("127.0.0.1", 26379),),
        service_name="fleet",
        sentinel_password=SENTINEL_PASSWORD,
    )
    shown = dict(policy.__rich_repr__())
    assert shown["sentinel_password"] == REDACTED
    assert "sentinel_password='REDACTED'" in repr(policy)
    assert "S3cret" not in f"{policy} {load({'state': {'mode': 'single'}})}"
    assert policy.sentinel_password == SENTINEL_PASSWORD
    state = {"mode": "sentinel", "sentinels": [["h", 1]], "service_name": "m"}
    with pytest.raises(ConfigError) as raised:
        load({"state": {**state, "sentinel_password": SENTINEL_PASSWORD * 1000}})
    assert str(raised.value) == "state.sentinel_password: expected str of length <= 4096"
