"""The verbs' signatures as type checkers see them: requests' keywords, plus ``deadline=``
and ``resilience=``.

Only type checkers see the class. At run time TypedVerbs is requests.Session itself, whose verbs
pass every keyword on to ``ResilientSession.request``: a frame fewer on every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import requests

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from requests import Response
    from requests.cookies import RequestsCookieJar
    from requests.models import _JSON
    from requests.sessions import (
        _Auth,
        _Cert,
        _Data,
        _Files,
        _HeadersUpdateMapping,
        _HooksInput,
        _Params,
        _TextMapping,
        _Timeout,
        _Verify,
    )

    class TypedVerbs(requests.Session):
        """``requests.Session`` with ``deadline: float | None`` on each verb, keywords typed as in
        requests' stubs, so a misspelt keyword or a bad value is caught as it is on requests."""

        def get(
            self,
            url: str | bytes,
            *,
            params: _Params | None = ...,
            data: _Data | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            json: _JSON | None = None,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...

        def options(
            self,
            url: str | bytes,
            *,
            params: _Params | None = ...,
            data: _Data | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            json: _JSON | None = None,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...

        def head(
            self,
            url: str | bytes,
            *,
            params: _Params | None = ...,
            data: _Data | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            json: _JSON | None = None,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...

        def post(
            self,
            url: str | bytes,
            data: _Data | None = None,
            json: _JSON | None = None,
            *,
            params: _Params | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...

        def put(
            self,
            url: str | bytes,
            data: _Data | None = None,
            *,
            params: _Params | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            json: _JSON | None = None,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...

        def patch(
            self,
            url: str | bytes,
            data: _Data | None = None,
            *,
            params: _Params | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            json: _JSON | None = None,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...

        def delete(
            self,
            url: str | bytes,
            *,
            params: _Params | None = ...,
            data: _Data | None = ...,
            headers: _HeadersUpdateMapping | None = ...,
            cookies: RequestsCookieJar | _TextMapping | None = ...,
            files: _Files | None = ...,
            auth: _Auth | None = ...,
            timeout: _Timeout | None = ...,
            allow_redirects: bool = ...,
            proxies: _TextMapping | None = ...,
            hooks: _HooksInput | None = ...,
            stream: bool | None = ...,
            verify: _Verify | None = ...,
            cert: _Cert | None = ...,
            json: _JSON | None = None,
            deadline: float | None = ...,
            resilience: Mapping[str, Any] | None = ...,
        ) -> Response: ...
else:
    TypedVerbs = requests.Session  # hot path: typed-verbs
