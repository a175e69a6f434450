"""Adapters that are not ours, run inside the pipeline: one another library puts in place of
ours, and one a user mounts.

requests-mock's ``Mocker`` patches ``requests.Session.send`` so that, for each send, the
session's ``get_adapter`` is an instance attribute handing out the mocker's own adapter, and
sets it back afterwards. A class-level override of ``get_adapter`` is never consulted then, so
``ResilientSession.__setattr__`` hands such a ``get_adapter`` to :func:`resilient_get_adapter`:
the adapter it returns, unless it is a ``ResilientAdapter``, becomes the transport of one that
shares the session's per-host state. Its answers are then retried, waited for and logged as
``responses``' are (``responses`` patches ``HTTPAdapter.send``, beneath the pipeline).
Nothing of this runs on a call that no such library touched.

An ``HTTPAdapter`` a user mounts on a ``ResilientSession`` (requests' way to size a pool, or a
subclass with a TLS context or a source address) stays what ``session.adapters`` and
``get_adapter`` return, as requests promises; :func:`wrap_mounted` makes it the transport of a
``ResilientAdapter`` on the session's per-host state by giving the instance a ``send`` that
runs the pipeline, each try then going out through its class's own ``send``, on its own pools.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.adapters import BaseAdapter, HTTPAdapter

from ._state.fallback import FailedCall
from ._state.registry import HostRegistry
from ._transport.watched import watch_pools
from .adapter import ResilientAdapter
from .clock import Clock

GetAdapter = Callable[[str], BaseAdapter]
Fallback = Callable[[FailedCall], "requests.Response | None"]


class _SendThrough(HTTPAdapter):
    """``send`` is another adapter's: what ``ResilientAdapter._transport`` calls for one try."""

    _through: BaseAdapter

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        return self._through.send(
            request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
        )


class Around(ResilientAdapter, _SendThrough):
    """A ``ResilientAdapter`` whose tries go out through *through*.

    In this class's method order ``_SendThrough`` follows ``ResilientAdapter``, so the
    ``super().send`` of ``ResilientAdapter._transport`` is *through*'s ``send``; the
    pipeline, and ``ResilientAdapter`` itself, are unchanged. Closing it leaves *through* open:
    it belongs to whoever installed it.
    """

    def __init__(
        self,
        through: BaseAdapter,
        *,
        registry: HostRegistry,
        clock: Clock,
        rng: random.Random,
        fallback: Fallback | None = None,
    ) -> None:
        self._through = through
        super().__init__(registry=registry, clock=clock, rng=rng, fallback=fallback)


def is_default(session: requests.Session, get_adapter: object) -> bool:
    """True when *get_adapter* is the session's own method, bound to it (what requests-mock
    sets back after each send)."""
    func = getattr(get_adapter, "__func__", None)
    return getattr(get_adapter, "__self__", None) is session and (
        func is requests.Session.get_adapter or func is type(session).get_adapter
    )


def resilient_get_adapter(
    get_adapter: GetAdapter, around: Callable[[BaseAdapter], ResilientAdapter]
) -> GetAdapter:
    """*get_adapter*, except that an adapter it returns that is not a ``ResilientAdapter`` is
    replaced by ``around(adapter)``."""

    def wrapped(url: str) -> BaseAdapter:
        adapter = get_adapter(url)
        if isinstance(adapter, ResilientAdapter) or around_of(adapter) is not None:
            return adapter
        return around(adapter)

    return wrapped


class _MountedOwn(HTTPAdapter):
    """What the pipeline asks of its transport, answered by the mounted adapter's class for
    the mounted adapter: a try's ``send``, the response it builds, its proxy's pool manager.

    The mounted instance's own attributes are its ``MountedAround``'s (below), so its class is
    asked.
    """

    _mounted: HTTPAdapter

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        mounted = self._mounted
        return type(mounted).send(
            mounted, request, stream=stream, timeout=timeout, verify=verify, cert=cert,
            proxies=proxies,
        )  # fmt: skip

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        mounted = self._mounted
        return type(mounted).build_response(mounted, req, resp)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        mounted = self._mounted
        return type(mounted).proxy_manager_for(mounted, proxy, **proxy_kwargs)


class MountedAround(ResilientAdapter, _MountedOwn):
    """The pipeline of an ``HTTPAdapter`` mounted on a ``ResilientSession``.

    :func:`wrap_mounted` gives the mounted instance this one's ``send``, and, for the pools it
    makes for a proxy and the responses of a capped host, this one's ``proxy_manager_for`` and
    ``build_response``: in this class's method order ``_MountedOwn`` follows
    ``ResilientAdapter``, so their ``super()`` is the mounted adapter's class, on the mounted
    adapter. Its pools, TLS settings and ``send`` override are then the ones each try uses,
    watched as ours are; this one's own pool manager stays empty.
    """

    def __init__(
        self, mounted: HTTPAdapter, *, registry: HostRegistry, fallback: Fallback | None = None
    ) -> None:
        self._mounted = mounted
        super().__init__(registry=registry, fallback=fallback)

    def attach(self, registry: HostRegistry) -> None:
        super().attach(registry)
        mounted = self._mounted
        # ResilientAdapter.attach sets a capped build_response only where a host is capped;
        # the mounted adapter is the one that builds each try's response.
        capped = vars(self).get("build_response")
        if capped is not None:
            mounted.build_response = capped  # type: ignore[method-assign]  # per instance
        elif _owned_by(vars(mounted).get("build_response"), self):
            del mounted.build_response


def wrap_mounted(
    adapter: HTTPAdapter,
    session: requests.Session,
    registry: HostRegistry,
    fallback: Fallback | None = None,
) -> None:
    """Run every ``send`` of *adapter*, mounted on *session*, through the pipeline on
    *registry*: retries, the deadline (its pools watched), the guards, ``health()``.

    An adapter wrapped already, mounted on a second prefix or session, keeps its
    ``MountedAround``, moved to *registry*: one instance has one ``send``.
    """
    current = around_of(adapter)
    if current is None:
        current = MountedAround(adapter, registry=registry, fallback=fallback)
        # Instance attributes, so that session.adapters and get_adapter still show the adapter
        # as mounted, as requests' own tests check; its class's methods stay its own.
        adapter.send = current.send  # type: ignore[method-assign]  # per instance
        adapter.proxy_manager_for = current.proxy_manager_for  # type: ignore[method-assign]  # per instance
    elif current.registry is not registry:
        current.attach(registry)
    current.serve(session)
    watch_pools(adapter.poolmanager)


def around_of(adapter: BaseAdapter) -> MountedAround | None:
    """The ``MountedAround`` whose pipeline *adapter*'s ``send`` runs, if any."""
    send = vars(adapter).get("send")
    owner = getattr(send, "__self__", None)
    return owner if isinstance(owner, MountedAround) else None


def _owned_by(method: object, owner: object) -> bool:
    return getattr(method, "__self__", None) is owner
