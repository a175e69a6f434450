"""The policy models: what can be configured, its defaults and its valid ranges.

They are msgspec Structs: the same classes validate input, give the error path, produce the
JSON Schema shipped in docs/, and are the frozen values the pipeline reads.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec

from resilient_session._hops import ATTEMPT_HEADER, TIMEOUT_HEADER
from resilient_session._observe.redact import REDACTED, redact_store_url

from .store import check_state

# Every number is finite and bounded, so no value can overflow a computation or a container
# later, in the middle of a call. A day caps any duration; docs/configuration.md says why each
# count is capped where it is.
DAY: Final = 86_400.0

Seconds: TypeAlias = Annotated[float, msgspec.Meta(gt=0, le=DAY)]
Status: TypeAlias = Annotated[int, msgspec.Meta(ge=100, le=599)]
# An IPv4 or IPv6 network in CIDR notation, or one address; the longest IPv6 one is 43.
Network: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]

# A sentinel's [host, port]; a host has no whitespace, a path or userinfo.
SentinelAddress: TypeAlias = tuple[
    Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\s/@]+$")],
    Annotated[int, msgspec.Meta(ge=1, le=65_535)],
]
FilePath: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]

# RFC 9110 section 5.6.2: a field name is a token.
HeaderName: TypeAlias = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
]

# Headers a configured name must never overwrite: message framing (the request would be
# misread), hop-by-hop headers (RFC 9110 section 7.6.1), and credentials.
RESERVED_HEADERS: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "authorization",
        "cookie",
        "set-cookie",
        "expect",
    }
)


def check_header_names(struct: msgspec.Struct, fields: tuple[str, ...]) -> None:
    """Refuse a reserved header in any of *fields* of *struct*, naming the field."""
    for field in fields:
        name = getattr(struct, field)
        if name is not None and name.lower() in RESERVED_HEADERS:
            raise ValueError(
                f"{field}: {name!r} is a framing, hop-by-hop or credential header, "
                "which the library must not overwrite"
            )


class StrictStruct(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every config model: frozen, and an unknown key is an error."""


class RetryPolicy(StrictStruct, frozen=True):
    """How many tries a call gets, how long to wait between them, and what is retried."""

    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 4
    backoff_base: Seconds = 0.5
    backoff_cap: Seconds = 8.0
    retry_after_cap: Annotated[float, msgspec.Meta(ge=0, le=DAY)] = 30.0
    transient_statuses: frozenset[Status] = frozenset({408, 425, 500, 502, 504})
    overload_statuses: frozenset[Status] = frozenset({429, 503})
    # Null reads every body whole, as requests does; docs/configuration.md says why 2**53.
    max_response_bytes: Annotated[int, msgspec.Meta(ge=1, le=2**53)] | None = None

    def __post_init__(self) -> None:
        if self.backoff_cap < self.backoff_base:
            raise ValueError(
                f"backoff_cap: must be >= backoff_base ({self.backoff_base}), "
                f"got {self.backoff_cap}"
            )
        both = self.transient_statuses & self.overload_statuses
        if both:
            raise ValueError(f"overload_statuses: {sorted(both)} also listed in transient_statuses")


class BudgetPolicy(StrictStruct, frozen=True):
    """The per-host token bucket that bounds retries to a share of first tries."""

    ratio: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.2
    min_per_second: Annotated[float, msgspec.Meta(ge=0, le=10_000)] = 1.0
    max_tokens: Annotated[float, msgspec.Meta(ge=1, le=100_000)] = 10.0


class BreakerPolicy(StrictStruct, frozen=True):
    """The per-host circuit breaker."""

    failure_threshold: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 20
    recovery_timeout: Seconds = 5.0
    recovery_timeout_max: Seconds = 60.0
    half_open_max_calls: Annotated[int, msgspec.Meta(ge=1, le=1_000)] = 1
    window: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None
    failure_rate_threshold: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.5
    minimum_calls: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 10

    def __post_init__(self) -> None:
        if self.recovery_timeout_max < self.recovery_timeout:
            raise ValueError(
                f"recovery_timeout_max: must be >= recovery_timeout ({self.recovery_timeout}), "
                f"got {self.recovery_timeout_max}"
            )


class DeadlinePolicy(StrictStruct, frozen=True):
    """The default deadline of a call and the headers that tell the upstream about each try:
    what remains of the deadline, and which try of how many this is."""

    default: Seconds | None = None
    header: HeaderName | None = TIMEOUT_HEADER
    attempt_header: HeaderName | None = ATTEMPT_HEADER

    def __post_init__(self) -> None:
        check_header_names(self, ("header", "attempt_header"))
        if (
            self.header is not None
            and self.attempt_header is not None
            and self.header.lower() == self.attempt_header.lower()
        ):
            raise ValueError(
                f"attempt_header: must differ from header ({self.header!r}), "
                f"got {self.attempt_header!r}"
            )


class TimeoutPolicy(StrictStruct, frozen=True):
    """Per-try timeouts used when the caller gives none."""

    connect: Seconds = 5.0
    read: Seconds = 30.0


class ThrottlePolicy(StrictStruct, frozen=True):
    """Client-side adaptive throttling: refuse locally the share of tries the host would fail.

    Over the last ``window`` seconds, with ``tries`` wanted (refused ones included) and
    ``accepts`` answered without failure, a try is refused with probability
    ``max(0, (tries - k * accepts) / (tries + 1))`` once the window holds ``min_tries``.
    """

    enabled: bool = True
    k: Annotated[float, msgspec.Meta(ge=1, le=100)] = 2.0
    window: Annotated[float, msgspec.Meta(ge=1, le=DAY)] = 30.0
    min_tries: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 20


class LimitPolicy(StrictStruct, frozen=True):
    """An adaptive cap on this client's tries in flight to one host (AIMD)."""

    enabled: bool = True
    initial: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 32
    # A host that has not answered yet may take up to this many at once (never fewer than
    # initial, never more than max): docs/configuration.md says why.
    initial_burst: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 64
    min: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 4
    max: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1000
    backoff_ratio: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.9
    max_wait: Annotated[float, msgspec.Meta(ge=0, le=DAY)] = 0.5

    def __post_init__(self) -> None:
        if self.max < self.min:
            raise ValueError(f"max: must be >= min ({self.min}), got {self.max}")
        if not self.min <= self.initial <= self.max:
            raise ValueError(
                f"initial: must be between min ({self.min}) and max ({self.max}), "
                f"got {self.initial}"
            )


class HedgingPolicy(StrictStruct, frozen=True):
    """Hedged tries: a second try of an idempotent call whose first has not answered after
    ``delay``, paid from the retry budget (docs/configuration.md, "hedging")."""

    enabled: bool = False
    # Seconds, or "auto": the host's recent p95 try latency, never below 10 ms.
    delay: Literal["auto"] | Annotated[float, msgspec.Meta(gt=0, le=DAY)] = "auto"
    # Each extra try is one more connection and thread in flight for the call.
    max_extra: Annotated[int, msgspec.Meta(ge=1, le=4)] = 1


# A memory bound: past a tebibyte no process here holds the store, so a larger value is a typo.
MAX_STORE_BYTES: Final = 2**40


class StalePolicy(StrictStruct, frozen=True):
    """Answers kept in memory to serve, marked, when a later call to the host fails.

    The fallback stage reads it: the last good answer of each GET or HEAD (200, 203, 300, 301,
    404, 410), held at most ``max_stale`` seconds (or the answer's own ``stale-if-error``),
    within ``max_bytes`` for the whole session.
    """

    enabled: bool = False
    max_stale: Annotated[float, msgspec.Meta(ge=0, le=DAY)] = 300.0
    max_bytes: Annotated[int, msgspec.Meta(ge=1, le=MAX_STORE_BYTES)] = 16_777_216
    max_entry_bytes: Annotated[int, msgspec.Meta(ge=1, le=MAX_STORE_BYTES)] = 1_048_576

    def __post_init__(self) -> None:
        if self.max_entry_bytes > self.max_bytes:
            raise ValueError(
                f"max_entry_bytes: must be <= max_bytes ({self.max_bytes}), "
                f"got {self.max_entry_bytes}"
            )


class FallbackPolicy(StrictStruct, frozen=True):
    """What a call that fails may be answered with instead (docs/configuration.md,
    "fallback")."""

    stale: StalePolicy = StalePolicy()


class HostPolicy(StrictStruct, frozen=True):
    """Everything that applies to one host, after merging its entry over the defaults."""

    retry: RetryPolicy = RetryPolicy()
    budget: BudgetPolicy = BudgetPolicy()
    breaker: BreakerPolicy = BreakerPolicy()
    throttle: ThrottlePolicy = ThrottlePolicy()
    limit: LimitPolicy = LimitPolicy()
    deadline: DeadlinePolicy = DeadlinePolicy()
    timeout: TimeoutPolicy = TimeoutPolicy()
    hedging: HedgingPolicy = HedgingPolicy()
    fallback: FallbackPolicy = FallbackPolicy()


class RegistryPolicy(StrictStruct, frozen=True):
    """Bounds on per-host state kept by a session."""

    max_hosts: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000


class EventsPolicy(StrictStruct, frozen=True):
    """What the ``http.try`` events hide."""

    redact_params: frozenset[Annotated[str, msgspec.Meta(min_length=1, max_length=256)]] = (
        frozenset()
    )


class InboundPolicy(StrictStruct, frozen=True):
    """What the inbound middleware adopts from a caller that also uses this library.

    The header names are the ``defaults.deadline`` ones: a fleet reads what it sends.
    """

    adopt_deadline: bool = True
    margin_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 10
    max_ms: Annotated[int, msgspec.Meta(ge=1, le=int(DAY * 1000))] = 300_000
    single_try_when_caller_retries: bool = True
    # Null adopts both headers from every caller; a list, from peers inside these networks
    # only: any client can send them, and switch off this service's retries for its request.
    trusted_networks: Annotated[tuple[Network, ...], msgspec.Meta(max_length=10_000)] | None = None

    def __post_init__(self) -> None:
        for index, text in enumerate(self.trusted_networks or ()):
            try:
                ipaddress.ip_network(text)
            except ValueError as exc:
                raise ValueError(f"trusted_networks[{index}]: {exc}") from None


class StatePolicy(StrictStruct, frozen=True):
    """Where breakers, budgets and throttle windows live: this process, or Redis for a fleet."""

    backend: Literal["memory", "redis"] = "memory"
    url: Annotated[
        str, msgspec.Meta(min_length=1, max_length=2048, pattern=r"^(redis|rediss|unix)://")
    ] = "redis://127.0.0.1:6379/0"
    key_prefix: Annotated[str, msgspec.Meta(max_length=256)] = "resilient-session:"
    # Every Redis command gets one try within this; a call never waits on it (docs/fleet.md).
    timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=60_000)] = 20
    sync_interval_ms: Annotated[int, msgspec.Meta(ge=10, le=60_000)] = 100
    # The kind of Redis deployment: one server, a Redis Cluster, or a master the sentinels
    # name (docs/fleet.md, "Cluster, Sentinel and TLS"); store.py checks the keys between them.
    mode: Literal["single", "cluster", "sentinel"] = "single"
    sentinels: Annotated[tuple[SentinelAddress, ...], msgspec.Meta(max_length=64)] = ()
    service_name: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    sentinel_password: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # TLS, with a rediss:// url: the names are redis-py's own.
    ssl_ca_certs: FilePath | None = None
    ssl_certfile: FilePath | None = None
    ssl_keyfile: FilePath | None = None
    ssl_cert_reqs: Literal["required", "optional", "none"] = "required"
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        check_state(self)

    # The URL may carry the store's password (docs/fleet.md): every way Python shows the
    # policy, and the Config holding it, prints the URL without its userinfo or secret values.
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.__rich_repr__())
        return f"{type(self).__name__}({shown})"

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return [(name, _shown_state(self, name)) for name in self.__struct_fields__]


def _shown_state(policy: StatePolicy, name: str) -> Any:
    value = getattr(policy, name)
    if name == "url":
        return redact_store_url(value)
    if name == "sentinel_password" and value is not None:
        return REDACTED
    return value
