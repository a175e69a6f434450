"""Re-export: moved to resilient_session.testing.redis_server; this path keeps working."""

from __future__ import annotations

from resilient_session.testing.redis_server import RedisServer, RedisServerMissing

__all__ = ["RedisServer", "RedisServerMissing"]
