"""The client side of the storm benchmark: five stacks, each driven from a process of its own.

  requests            plain requests.Session
  urllib3 Retry       HTTPAdapter(max_retries=Retry(total=3, backoff_factor=0.5,
                      status_forcelist=[500, 502, 503, 504]))
  tenacity            4 attempts, wait_random_exponential(multiplier=0.5, max=8), retrying
                      errors and 5xx
  pybreaker+tenacity  pybreaker.CircuitBreaker(fail_max=5, reset_timeout=5) around tenacity
  ResilientSession    ResilientSession() with its default config

A lane is one stack in one process. In one interpreter five stacks at a few hundred calls/s each
share one GIL, and a stack whose retries pile up slows its neighbours down; in a process of its
own it only spends its own time. Every stack gets the same per-try timeout, ``TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import pybreaker
import requests
import tenacity
from _upstream import CALL_ID_HEADER
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from resilient_session import CircuitOpenError, ResilientAdapter, ResilientSession

STACKS = ("requests", "urllib3 Retry", "tenacity", "pybreaker+tenacity", "ResilientSession")
# (connect, read) for every try of every stack: the hang outage is cut by the 5 s read timeout.
TIMEOUT = (1.0, 5.0)
_SAMPLE = 0.05  # seconds between two readings of a stack's breaker state
_MOST_RUNS = 100  # a lane process serves at most this many runs


class Stack:
    """One client stack: ``call`` returns the final response or raises; ``state`` is what the
    lane samples of it every 50 ms: the breaker's state where the stack has one (the storm),
    the hedging delay (tail.py)."""

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        raise NotImplementedError

    def state(self) -> str | None:
        return None


class PlainStack(Stack):
    def __init__(self, pool: int, retry: Retry | None = None) -> None:
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_maxsize=pool, max_retries=retry if retry is not None else 0)
        self.session.mount("http://", adapter)

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        return self.session.get(url, headers=headers, timeout=TIMEOUT)


def _is_server_error(response: requests.Response) -> bool:
    return response.status_code >= 500


def _last_outcome(state: tenacity.RetryCallState) -> Any:
    # When attempts run out, end as the last try did: its response, or its exception.
    assert state.outcome is not None
    return state.outcome.result()


class TenacityStack(Stack):
    def __init__(self, pool: int) -> None:
        self.session = requests.Session()
        self.session.mount("http://", HTTPAdapter(pool_maxsize=pool))
        self.retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(4),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=8),
            retry=tenacity.retry_if_exception_type(requests.RequestException)
            | tenacity.retry_if_result(_is_server_error),
            retry_error_callback=_last_outcome,
        )

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        response: requests.Response = self.retrying.copy()(
            self.session.get, url, headers=headers, timeout=TIMEOUT
        )
        return response


class BreakerTenacityStack(TenacityStack):
    def __init__(self, pool: int) -> None:
        super().__init__(pool)
        self.breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=5)

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        def guarded() -> requests.Response:
            response = TenacityStack.call(self, url, headers)
            # pybreaker counts exceptions only: a final 5xx must raise to count as a failure.
            response.raise_for_status()
            return response

        response: requests.Response = self.breaker.call(guarded)
        return response

    def state(self) -> str | None:
        return str(self.breaker.current_state).replace("-", "_")


class ResilientStack(Stack):
    def __init__(self, pool: int) -> None:
        self.session = ResilientSession()
        # Only the pool size changes, as for the other stacks: one connection per worker.
        self.session.mount(
            "http://", ResilientAdapter(registry=self.session.registry, pool_maxsize=pool)
        )
        self._host = ""

    def call(self, url: str, headers: dict[str, str]) -> requests.Response:
        self._host = self._host or url.split("/", 3)[2]
        return self.session.get(url, headers=headers, timeout=TIMEOUT)

    def state(self) -> str | None:
        for key, health in self.session.health().items():
            if key.endswith(self._host) and self._host:
                return str(health.breaker.value)
        return "closed"


def build_stack(name: str, pool: int) -> Stack:
    if name == "requests":
        return PlainStack(pool)
    if name == "urllib3 Retry":
        retry = Retry(total=3, backoff_factor=0.5, status_forcelist=[500, 502, 503, 504])
        return PlainStack(pool, retry)
    if name == "tenacity":
        return TenacityStack(pool)
    if name == "pybreaker+tenacity":
        return BreakerTenacityStack(pool)
    return ResilientStack(pool)


def is_refusal(exc: BaseException) -> bool:
    """A call the client refused locally, without a try: a breaker's (or, from the guards on,
    a throttle's or a concurrency limit's) refusal."""
    return isinstance(exc, CircuitOpenError | pybreaker.CircuitBreakerError)


# --- one run of one lane -------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One scenario as each lane runs it, on a fresh stack.

    Open loop (``rate`` > 0): ``calls`` calls at fixed instants from ``started``, into a pool
    of ``workers`` threads, so a stalled stack cannot lower the load it is offered. Closed
    loop (``rate`` 0): ``workers`` threads each call back to back for ``duration`` seconds.
    """

    started: float  # the time.monotonic() instant of call 0; every process shares that clock
    first_id: int  # call ids start here, so a try left over from an earlier run never counts
    rate: float
    calls: int
    workers: int
    duration: float
    drain: float  # longest wait for calls still running after the last is issued


@dataclass(frozen=True)
class CallRecord:
    call_id: int
    issued: float  # seconds after the start at which the call was handed to a worker
    done: float  # seconds after the start; inf when still running at the end of the drain
    ok: bool
    error: str | None
    refused: bool = False


@dataclass(frozen=True)
class LaneResult:
    calls: list[CallRecord]
    states: list[tuple[float, str]]  # (seconds after the start, what Stack.state() said)
    issue_lag: tuple[float, float]  # the scheduler's lateness issuing calls: p99 and worst, s
    cpu: float  # CPU seconds the lane's process spent on the run, all threads


def _call(stack: Stack, url: str, call_id: int) -> tuple[bool, str | None, bool]:
    try:
        status = stack.call(url, {CALL_ID_HEADER: str(call_id)}).status_code
    except Exception as exc:  # noqa: BLE001 - every failure is an outcome to count
        return False, type(exc).__name__, is_refusal(exc)
    return status == 200, None if status == 200 else f"HTTP {status}", False


def run_lane(stack: Stack, url: str, run: Run) -> LaneResult:
    cpu = time.process_time()
    lock = threading.Lock()
    calls: list[CallRecord] = []
    states: list[tuple[float, str]] = []
    stop = threading.Event()

    def sample() -> None:
        # Bounded in count too: the run's length and its drain, plus a margin.
        for _ in range(int((run.duration + run.drain + 10) / _SAMPLE)):
            if stop.wait(_SAMPLE):
                return
            state = stack.state()
            if state is not None:
                states.append((time.monotonic() - run.started, state))

    sampler = threading.Thread(target=sample, name="breaker-sampler", daemon=True)
    sampler.start()
    try:
        if run.rate > 0:
            issue_lag = _open_loop(stack, url, run, calls, lock)
        else:
            _closed_loop(stack, url, run, calls, lock)
            issue_lag = (0.0, 0.0)
    finally:
        stop.set()
        sampler.join(1)
    with lock:
        return LaneResult(list(calls), states, issue_lag, time.process_time() - cpu)


def _open_loop(
    stack: Stack, url: str, run: Run, calls: list[CallRecord], lock: threading.Lock
) -> tuple[float, float]:
    def one(call_id: int, issued: float) -> None:
        ok, error, refused = _call(stack, url, call_id)
        record = CallRecord(call_id, issued, time.monotonic() - run.started, ok, error, refused)
        with lock:
            calls.append(record)

    pool = ThreadPoolExecutor(run.workers, thread_name_prefix="lane")
    futures: list[Future[None]] = []
    lags: list[float] = []
    issued: dict[int, float] = {}
    try:
        for n in range(run.calls):
            due = run.started + n / run.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            # A call counts from when it was issued: if the machine delays the scheduler, the
            # call lands in the phase it actually met, and the delay is reported, not hidden.
            issued[n] = time.monotonic() - run.started
            lags.append(max(0.0, issued[n] - n / run.rate))
            futures.append(pool.submit(one, run.first_id + n, issued[n]))
        wait_futures(futures, timeout=run.drain)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    with lock:
        finished = {record.call_id for record in calls}
        # A call still running after the drain counts as failed, with unbounded latency.
        calls += [
            CallRecord(run.first_id + n, at, math.inf, False, "unfinished")
            for n, at in issued.items()
            if run.first_id + n not in finished
        ]
    lags.sort()
    return (lags[int(0.99 * (len(lags) - 1))], lags[-1]) if lags else (0.0, 0.0)


def _closed_loop(
    stack: Stack, url: str, run: Run, calls: list[CallRecord], lock: threading.Lock
) -> None:
    ids = itertools.count(run.first_id)
    end = run.started + run.duration
    # Bounded in count as well as time: no worker can make more calls than this.
    most = int(run.duration * 1000) + 1

    def worker() -> None:
        delay = run.started - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for _ in range(most):
            at = time.monotonic()
            if at >= end:
                return
            call_id = next(ids)
            ok, error, refused = _call(stack, url, call_id)
            done = time.monotonic()
            record = CallRecord(call_id, at - run.started, done - run.started, ok, error, refused)
            with lock:
                calls.append(record)

    threads = [
        threading.Thread(target=worker, name=f"caller{i}", daemon=True) for i in range(run.workers)
    ]
    for thread in threads:
        thread.start()
    give_up = end + run.drain
    for thread in threads:
        thread.join(max(0.0, give_up - time.monotonic()))


# --- the lane processes --------------------------------------------------------------------------


def _serve(
    conn: Connection,
    stack_name: str,
    url: str,
    lifetime: float,
    build: Callable[[str, int], Stack] = build_stack,
) -> None:
    # Up to a thousand workers per lane: their stacks need far less than the default 8 MiB.
    threading.stack_size(1 << 20)
    # The scheduler thread must issue calls on time while hundreds of workers hold the GIL in
    # turn: a shorter switch interval gets it the GIL sooner after each of its sleeps.
    sys.setswitchinterval(0.001)
    # urllib3 logs every retry and full pool at WARNING; the tables say what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    conn.send("ready")
    ends = time.monotonic() + lifetime
    # Bounded: the lane stops by itself at the end of its lifetime, or when its parent goes.
    with contextlib.suppress(EOFError, OSError, KeyboardInterrupt):
        for _ in range(_MOST_RUNS):
            if not conn.poll(max(0.0, ends - time.monotonic())):
                return
            run = conn.recv()
            if not isinstance(run, Run):
                return
            conn.send(run_lane(build(stack_name, run.workers), url, run))


class Lanes:
    """One process per stack, each calling its own URL, for the length of a ``with`` block.

    The stacks are *names*, each built in its lane by *build* (a module-level function, so a
    spawned process can import it): the storm's five by default.
    """

    def __init__(
        self,
        urls: Sequence[str],
        lifetime: float = 900.0,
        names: Sequence[str] = STACKS,
        build: Callable[[str, int], Stack] = build_stack,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[Connection] = []
        try:
            for name, url in zip(names, urls, strict=True):
                conn, child = context.Pipe()
                process = context.Process(
                    target=_serve, args=(child, name, url, lifetime, build), name=name, daemon=True
                )
                process.start()
                child.close()
                self._processes.append(process)
                self._conns.append(conn)
            for conn in self._conns:
                if not conn.poll(60) or conn.recv() != "ready":
                    raise RuntimeError("a lane process did not start")
        except BaseException:
            self.close()
            raise

    def run(self, run: Run, timeout: float, only: int | None = None) -> list[LaneResult]:
        """Every lane runs *run* at once, or lane *only* alone; results in the stacks' order."""
        conns = self._conns if only is None else [self._conns[only]]
        for conn in conns:
            conn.send(run)
        ends = time.monotonic() + timeout
        results: list[LaneResult] = []
        for conn in conns:
            if not conn.poll(max(0.0, ends - time.monotonic())):
                raise RuntimeError("a lane did not finish its run in time")
            results.append(conn.recv())
        return results

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        # One grace period for all: a lane still in a run (Ctrl-C, an error) or still holding
        # hung tries is stopped rather than waited for.
        ends = time.monotonic() + 3
        for process in self._processes:
            process.join(max(0.0, ends - time.monotonic()))
        for process in self._processes:
            if process.is_alive():
                process.terminate()
                process.join(5)
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
