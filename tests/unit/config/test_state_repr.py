"""The state policy shows its store URL without the password, userinfo or secret values."""

from __future__ import annotations

from resilient_session.config import StatePolicy, load

STORE_URL = "redis://user-S3cret:S3cretPW@127.0.0.1:6399/0?password=tok-S3cret"
SHOWN = "redis://127.0.0.1:6399/0?password=REDACTED"


def test_repr_str_and_rich_repr_hide_the_store_secrets():
    """repr, str, an f-string and rich's __rich_repr__ all show the URL as redacted."""
    policy = StatePolicy(backend="redis", url=STORE_URL)
    assert dict(policy.__rich_repr__())["url"] == SHOWN
    assert dict(policy.__rich_repr__())["backend"] == "redis"
    assert repr(policy) == (
        f"StatePolicy(backend='redis', url='{SHOWN}', key_prefix='resilient-session:', "
        "timeout_ms=20, sync_interval_ms=100)"
    )
    assert str(policy) == f"{policy}" == repr(policy)
    assert policy.url == STORE_URL


def test_a_loaded_config_shows_the_redacted_store_url():
    """The Config holding the policy shows it through the policy's repr."""
    config = load({"state": {"url": STORE_URL.replace("user-S3cret", "")}})
    assert f"url='{SHOWN}'" in repr(config)
    assert "S3cret" not in f"{config}"
    assert config.state.url.startswith("redis://:S3cretPW@")
