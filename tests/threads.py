"""Running a body in many threads at once, for the hammer tests."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_together(count: int, body: Callable[[int], None], timeout: float = 30.0) -> None:
    """Run ``body(index)`` in *count* threads released together by a barrier; re-raise the
    first failure, so an assertion inside a thread fails the test."""
    barrier = threading.Barrier(count)
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            body(index)
        except BaseException as exc:  # noqa: BLE001 - carried to the main thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if any(thread.is_alive() for thread in threads):
        raise AssertionError(f"threads still running after {timeout} s")
    if failures:
        raise failures[0]
