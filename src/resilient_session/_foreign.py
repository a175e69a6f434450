"""An adapter that another library puts in place of ours, run inside the pipeline.

requests-mock's ``Mocker`` patches ``requests.Session.send`` so that, for each send, the
session's ``get_adapter`` is an instance attribute handing out the mocker's own adapter, and
sets it back afterwards. A class-level override of ``get_adapter`` is never consulted then, so
``ResilientSession.__setattr__`` hands such a ``get_adapter`` to :func:`resilient_get_adapter`:
the adapter it returns, unless it is a ``ResilientAdapter``, becomes the transport of one that
shares the session's per-host state. Its answers are then retried, waited for and logged as
``responses``' are (``responses`` patches ``HTTPAdapter.send``, beneath the pipeline).
Nothing of this runs on a call that no such library touched.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.adapters import BaseAdapter, HTTPAdapter

from ._state.registry import HostRegistry
from .adapter import ResilientAdapter
from .clock import Clock

GetAdapter = Callable[[str], BaseAdapter]


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
    ) -> None:
        self._through = through
        super().__init__(registry=registry, clock=clock, rng=rng)


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
        return adapter if isinstance(adapter, ResilientAdapter) else around(adapter)

    return wrapped
