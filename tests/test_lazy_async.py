"""The package never loads what only async callers need: anyio comes with the httpx extra and
is imported by the first awaited wait, never by ``import resilient_session`` or a sync call."""

from __future__ import annotations

import subprocess
import sys

# What the httpx extra brings, and what anyio would load with it.
ASYNC_ONLY = ("anyio", "httpx", "httpcore", "h11", "trio", "sniffio")

PROGRAM = """
import sys
import resilient_session
import resilient_session.testing
from resilient_session import HostRegistry, ResilientSession, load
from resilient_session.testing import FakeClock, ScriptedTransport

clock = FakeClock()
config = load({"defaults": {"retry": {"max_attempts": 2}, "limit": {"enabled": True}}})
registry = HostRegistry(config, clock=clock)
session = ResilientSession(registry=registry)
ScriptedTransport(clock, 503, 200).attach(session)
assert session.get("https://api.test/").status_code == 200
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))
print(loaded)
"""


def test_the_package_and_a_sync_call_load_nothing_async():
    """Importing the package and its testing helpers, building a registry with a concurrency
    limit and making a call with a retry loads none of anyio, httpx, httpcore, h11, trio or
    sniffio, though all are installed here."""
    printed = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", PROGRAM, *ASYNC_ONLY], capture_output=True, check=True, text=True
    ).stdout.strip()
    assert printed == "[]"
