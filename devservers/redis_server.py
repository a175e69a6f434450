"""A throwaway ``redis-server`` on a free loopback port, for tests and benchmarks of the fleet
state: started, killed, paused and restarted on demand, and always stopped."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from resilient_session.clock import SYSTEM_CLOCK

from . import _resp

if TYPE_CHECKING:
    # typing.Self is 3.11's; the project supports 3.10.
    from typing_extensions import Self

_READY_WAIT = 10.0
_STOP_WAIT = 5.0
_POLL = 0.02


class RedisPartMissing(RuntimeError):
    """A part a test Redis needs is missing here: a program not on PATH (``redis-server``,
    ``redis-cli``, ``openssl``), or a ``redis-server`` built without TLS."""


class RedisServerMissing(RedisPartMissing):
    """``redis-server`` is not on PATH."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def program(name: str) -> str:
    """The path of *name* on PATH.

    Raises:
        RedisPartMissing: it is not there (RedisServerMissing for ``redis-server``).
    """
    found = shutil.which(name)
    if found is None:
        missing = RedisServerMissing if name == "redis-server" else RedisPartMissing
        raise missing(f"{name} is not on PATH (Debian: apt-get install {_PACKAGES[name]})")
    return found


def wait_until(check: Callable[[], bool], timeout: float, failed: str) -> None:
    """Poll *check* every 50 ms until it holds.

    Raises:
        RuntimeError: *failed*, past *timeout* seconds.
    """
    until = SYSTEM_CLOCK.monotonic() + timeout
    while not check():
        if SYSTEM_CLOCK.monotonic() > until:
            raise RuntimeError(f"{failed} within {timeout} s")
        # A real wait, even while testing.fast() skips the system clock's sleeps.
        threading.Event().wait(_WAIT_POLL)


_WAIT_POLL = 0.05
_PACKAGES = {"redis-server": "redis-server", "redis-cli": "redis-tools", "openssl": "openssl"}


class StartedInWith:
    """``with part:`` starts it and always closes it; a part gives ``start()`` and ``close()``."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class RedisServer(StartedInWith):
    """``redis-server --port N --bind 127.0.0.1 --save "" --appendonly no``: nothing is
    written to disk, so a restart starts empty, as a flushed or replaced Redis does.

    Example::

        with RedisServer() as server:
            session = ResilientSession({"state": {"backend": "redis", "url": server.url}})
    """

    def __init__(
        self, port: int | None = None, niceness: int | None = None, options: Sequence[str] = ()
    ) -> None:
        self._executable = program("redis-server")
        self.port = port if port is not None else free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._directory = tempfile.TemporaryDirectory(prefix="resilient-session-redis-")
        self.directory = self._directory.name
        self._process: subprocess.Popen[bytes] | None = None
        # A benchmark on a shared machine may give the server the CPU priority a Redis host
        # of its own would give it (a negative niceness needs root).
        self._niceness = niceness
        # More of redis-server's options, after the ones above (a replica's --replicaof).
        self._options = tuple(options)
        # What :meth:`command` authenticates with, when the server asks for a password.
        self.password: str | None = None

    def close(self) -> None:
        """Stop the server and remove its directory: it cannot be started again."""
        self.stop()
        self._directory.cleanup()

    def arguments(self) -> list[str]:
        """redis-server's command line: a loopback port, nothing written to disk."""
        return [
            self._executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._directory.name,
            "--loglevel",
            "warning",
            *self._options,
        ]

    def start(self) -> None:
        """Start the server on its port and wait until it answers PING."""
        # Its output goes to a file of its own: why it exited, when it does at once.
        with open(os.path.join(self.directory, "output.log"), "ab") as output:
            self._process = subprocess.Popen(  # noqa: S603 - a fixed argument list, no shell
                self.arguments(), stdout=output, stderr=subprocess.STDOUT
            )
        if self._niceness is not None:
            os.setpriority(os.PRIO_PROCESS, self._process.pid, self._niceness)
        self._wait_ready()

    def output(self) -> str:
        """What the server wrote to stdout and stderr, the last 2,000 characters of it."""
        try:
            with open(os.path.join(self.directory, "output.log"), "rb") as log:
                return log.read().decode(errors="replace")[-2000:]
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        until = SYSTEM_CLOCK.monotonic() + _READY_WAIT
        while SYSTEM_CLOCK.monotonic() < until:
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise RuntimeError(f"redis-server exited with {code}: {self.output()}")
            if self.ping():
                return
            # A real wait, even while testing.fast() skips the system clock's sleeps.
            threading.Event().wait(_POLL)
        self.stop()
        raise RuntimeError(
            f"redis-server on port {self.port} did not answer within {_READY_WAIT} s"
        )

    def ping(self, timeout: float = 0.5) -> bool:
        """True when the server answers PING within *timeout* seconds."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str, timeout: float = 1.0, asking: bool = False) -> Any:
        """The server's reply to one command (``ROLE``, ``CLUSTER NODES``, ...): a str, int,
        None or a list of them; *asking* sends ``ASKING`` first, as a cluster client does to
        a node importing the key's slot.

        Raises:
            OSError: no connection, or no reply within *timeout* seconds.
            testing._resp.ReplyError: an error reply.
        """
        return _resp.command(
            self.port,
            *args,
            timeout=timeout,
            context=self.client_context(),
            password=self.password,
            asking=asking,
        )

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS a client needs to talk to this server: none here."""
        return None

    @property
    def running(self) -> bool:
        """True from :meth:`start` until the server exits or is killed or stopped."""
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server is gone at once, its state with it."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(timeout=_STOP_WAIT)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: connections are accepted by the kernel but never answered."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """A fresh, empty server on the same port."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Terminate the server (waking it first, if paused)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            try:
                process.wait(timeout=_STOP_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=_STOP_WAIT)
        self._process = None
