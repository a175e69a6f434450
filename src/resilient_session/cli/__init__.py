"""The command line: ``resilient-session get | check | stats | demo``."""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO
from urllib.parse import urlsplit

import msgspec
import requests
import yaml
from urllib3.exceptions import MaxRetryError

from resilient_session import __version__
from resilient_session._observe.printable import printable
from resilient_session._observe.redact import SENSITIVE_PARAMS, redact_text, sensitive_names
from resilient_session._observe.render import log_json_lines
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config import load
from resilient_session.config.route import path_of, route_for
from resilient_session.errors import ConfigError
from resilient_session.session import ResilientSession

from .report import demo_text, state_text, stats_text
from .stats import StatsAggregator

if TYPE_CHECKING:
    pass

PROG = "resilient-session"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_EPILOG = """\
exit codes:
  0  success (get: the final response was 2xx or 3xx)
  1  the request failed (get: a non-2xx final status, or an error such as a refused
     connection, a spent deadline or an open circuit breaker)
  2  bad usage or bad config (unknown flag, bad URL, bad header, unreadable or invalid file)

Errors are one line on stderr. `get` and `demo` write one JSON event per try to stderr.
"""

# RFC 9110 §5.6.2: a field name is a token.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class UsageError(Exception):
    """Bad command-line input: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line instead of the usage block and a message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 failed, 2 bad usage or config)."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.run(args))
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        # The reader went away (`| head`): nothing left worth saying, and nowhere to say it.
        _silence_stdout()
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - the contract: one line on stderr, never a traceback
        return _fail(f"internal error: {type(exc).__name__}: {printable(redact_text(str(exc)))}")


def _build_parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="A resilient requests.Session, from the command line.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Every subcommand ends its --help with the exit codes.
    command = functools.partial(
        commands.add_parser,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    get = command(
        "get",
        help="send one request through the stack: body to stdout, events to stderr",
        description="Send one request through ResilientSession, like a small curl.",
    )
    get.add_argument("url", metavar="URL", help="an absolute http:// or https:// URL")
    get.add_argument(
        "-X",
        "--request",
        dest="method",
        metavar="METHOD",
        help="the method (default GET, or POST with -d)",
    )
    get.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a request header; repeatable",
    )
    get.add_argument("-d", "--data", metavar="DATA", help="the request body, sent as given")
    get.add_argument("--config", metavar="FILE", help="a YAML config (default: built-in)")
    get.add_argument(
        "--deadline",
        type=_positive_seconds,
        metavar="SECONDS",
        help="seconds for the whole call, every try and wait included",
    )
    get.set_defaults(run=_run_get)

    check = command(
        "check",
        help="validate a config file; with --host, print the policy that host gets",
    )
    check.add_argument("config", metavar="CONFIG", help="the YAML file to validate")
    check.add_argument(
        "--host", metavar="HOST", help="host, host:port, [ipv6]:port or a URL (bare host: port 443)"
    )
    check.add_argument("--json", action="store_true", help="print the policy as JSON")
    check.set_defaults(run=_run_check)

    stats = command(
        "stats",
        help="per-host figures from JSON event lines",
        description="Read http.try and breaker.transition JSON lines (the event named under "
        "event, message or msg); print per-host figures. Other lines are skipped and counted; "
        "input with no event at all exits 2. p50/p99 are within 1% of the exact value.",
    )
    stats.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help="the event lines (default: stdin, also -)",
    )
    stats.add_argument("--json", action="store_true", help="print one JSON document")
    stats.set_defaults(run=_run_stats)

    demo = command(
        "demo",
        help="walk through every behaviour against an embedded flaky upstream on loopback",
    )
    demo.add_argument(
        "--stdout", action="store_true", help="stream the JSON events to stdout instead of stderr"
    )
    demo.set_defaults(run=_run_demo)
    return parser


# -- get ---------------------------------------------------------------------------------------


def _run_get(args: argparse.Namespace) -> int:
    url = _checked_url(args.url)
    headers = dict(_parse_header(raw, number) for number, raw in enumerate(args.header, 1))
    config = load(args.config)
    method = (args.method or ("POST" if args.data is not None else "GET")).upper()
    if not _TOKEN.match(method):
        raise UsageError(f"bad method {printable(repr(args.method))}")
    data = args.data.encode() if args.data is not None else None
    names = sensitive_names(config.events.redact_params)
    log_json_lines(sys.stderr)
    shown = f"{method} {printable(redact_text(url, names))}"
    with ResilientSession(config) as session:
        try:
            # Absent --deadline must leave the configured default deadline in force; passing
            # deadline=None would switch it off.
            if args.deadline is None:
                response = session.request(method, url, headers=headers, data=data)
            else:
                response = session.request(
                    method, url, headers=headers, data=data, deadline=args.deadline
                )
        except requests.RequestException as exc:
            error = _error_text(exc, names)
            return _fail(f"{shown}: {type(exc).__name__}: {error}{_tries(session)}")
    sys.stdout.buffer.write(response.content)
    sys.stdout.flush()
    if not 200 <= response.status_code < 400:
        # The reason phrase is the upstream's own text: it may carry escape sequences.
        reason = printable(redact_text(str(response.reason or ""), names))
        return _fail(f"{shown}: HTTP {response.status_code} {reason}{_tries(session)}")
    return EXIT_OK


def _checked_url(url: str) -> str:
    # Only ever shown redacted: a URL given on the command line often carries a token.
    shown = printable(repr(redact_text(url)))
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:  # a bad port, or a malformed IPv6 host ("http://[::1/")
        raise UsageError(f"bad URL {shown}: {printable(redact_text(str(exc)))}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UsageError(f"bad URL {shown}: give an absolute http:// or https:// URL")
    return url


def _parse_header(raw: str, number: int = 1) -> tuple[str, str]:
    # The value is never echoed: a header given on the command line is often a credential.
    name, colon, value = raw.partition(":")
    name = name.strip()
    if not colon:
        raise UsageError(f"bad header #{number}: no ':' after the name; use -H 'Name: value'")
    if not _TOKEN.match(name):
        raise UsageError(f"bad header name {printable(repr(name))}: use -H 'Name: value'")
    return name, value.strip()


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _error_text(exc: BaseException, names: frozenset[str] = SENSITIVE_PARAMS) -> str:
    """The useful part of a requests error, on one line, redacted and safe to print."""
    reason: Any = exc.args[0] if exc.args else exc
    if isinstance(reason, MaxRetryError) and reason.reason is not None:
        reason = reason.reason
    # urllib3 starts with its connection object's repr, which tells a reader nothing.
    text = re.sub(r"^<[^>]*>: ", "", str(reason))
    # urllib3 writes the whole URL, query and all, into its messages.
    return printable(" ".join(redact_text(text, names).split())) or type(exc).__name__


def _tries(session: ResilientSession) -> str:
    """``(3 tries)``, or ``(1 try, 2 refused)``: tries sent, then tries refused locally."""
    hosts = session.health().values()
    tries = sum(health.tries for health in hosts)
    refused = sum(health.refused for health in hosts)
    counted = f"{tries} {'try' if tries == 1 else 'tries'}"
    return f" ({counted}, {refused} refused)" if refused else f" ({counted})"


# -- check -------------------------------------------------------------------------------------


def _run_check(args: argparse.Namespace) -> int:
    config = load(args.config)
    if args.host is None:
        print(f"{args.config}: ok ({len(config.rules)} host entries)")
        print(state_text(config.state))
        return EXIT_OK
    host, port = _parse_host(args.host)
    matched = config.matching_pattern(host, port)
    routes = config.routes_for(host, port)
    # A URL's path picks the route it is in, as a call's does.
    route = route_for(routes, path_of(args.host)) if "://" in args.host else None
    chosen = route.policy if route is not None else config.for_host(host, port)
    policy = msgspec.to_builtins(chosen, order="deterministic")
    if args.json:
        print(json.dumps(policy, indent=2))
        return EXIT_OK
    entry = f'hosts."{matched}" over defaults' if matched is not None else "defaults only"
    if route is not None:
        entry = f'hosts."{matched}".routes."{route.pattern}" over {entry}'
    shown = f"[{host}]" if ":" in host else host
    print(f"# {args.config}: ok; policy for {shown}:{port} ({entry})")
    print(f"# {state_text(config.state)}")
    if routes and route is None:
        patterns = ", ".join(printable(r.pattern) for r in routes)
        print(f"# routes of its own: {patterns} (--host with a URL in one shows its policy)")
    print(yaml.safe_dump(policy, sort_keys=False, default_flow_style=False), end="")
    return EXIT_OK


def _parse_host(text: str) -> tuple[str, int]:
    """``(host, port)`` from host, host:port, [ipv6]:port or a URL; a bare host means 443.

    A URL may carry a path, query and fragment: only its host and port count.
    """
    is_url = "://" in text
    try:
        parts = urlsplit(text if is_url else f"https://{text}")
    except ValueError as exc:  # an unclosed [ipv6 bracket
        raise UsageError(f"bad --host {printable(repr(redact_text(text)))}: {exc}") from None
    if parts.username is not None or parts.password is not None:
        # Never echo it: the user part may be a credential.
        raise UsageError("bad --host: give it without user:password@")
    shown = printable(repr(redact_text(text)))
    try:
        port = parts.port
    except ValueError:
        port = -1
    bad_scheme = parts.scheme.lower() not in ("http", "https")
    has_path = not is_url and (parts.path not in ("", "/") or parts.query or parts.fragment)
    if not parts.hostname or bad_scheme or has_path or port == -1:
        raise UsageError(
            f"bad --host {shown}: use host, host:port (port 1..65535), [ipv6]:port or an "
            "http(s) URL"
        )
    if port is None:
        port = 80 if parts.scheme.lower() == "http" else 443
    if not 1 <= port <= 65535:
        raise UsageError(f"bad --host {shown}: the port must be 1..65535, got {port}")
    return parts.hostname.lower(), port


# -- stats -------------------------------------------------------------------------------------


def _run_stats(args: argparse.Namespace) -> int:
    aggregator = StatsAggregator()
    if args.file == "-":
        aggregator.feed_file(_text_stdin())
    else:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as lines:
                aggregator.feed_file(lines)
        except OSError as exc:
            raise UsageError(f"{args.file}: cannot read: {exc.strerror or exc}") from None
    if aggregator.used == 0:
        # Figures of nothing would read as a quiet service; most often it is the wrong file or
        # a log format whose lines name no event where stats looks (docs/events.md).
        source = "stdin" if args.file == "-" else printable(args.file)
        raise UsageError(_no_event(aggregator, source))
    summary = aggregator.summary()
    if args.json:
        # ensure_ascii (the default) writes controls, bidi overrides and lone surrogates from
        # the input as \u escapes: the document is plain ASCII, safe on any terminal.
        print(json.dumps(summary, indent=2, ensure_ascii=True))
    else:
        print(stats_text(summary))
    return EXIT_OK


def _no_event(aggregator: StatsAggregator, source: str) -> str:
    skipped = aggregator.skipped
    return (
        f"{source}: no event found in the input ({aggregator.lines} lines read: "
        f"{skipped.not_json} not JSON, {skipped.too_long} too long, "
        f"{skipped.other_event} other events, {skipped.malformed} malformed); stats reads "
        "JSON lines naming http.try, breaker.transition or state.* under event, message or msg"
    )


def _text_stdin() -> TextIO:
    # Undecodable bytes become non-JSON lines to skip, not a UnicodeDecodeError.
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return sys.stdin
    return io.TextIOWrapper(buffer, encoding="utf-8", errors="replace")


# -- demo --------------------------------------------------------------------------------------


def _run_demo(args: argparse.Namespace) -> int:
    # Imported here: the demo pulls in the loopback server, which get/check/stats never need.
    from .demo import run_demo

    started = SYSTEM_CLOCK.monotonic()
    scenes = run_demo(sys.stdout if args.stdout else sys.stderr)
    elapsed = SYSTEM_CLOCK.monotonic() - started
    sys.stderr.flush()
    print()
    print(demo_text(scenes))
    print(f"\n{len(scenes)} scenes in {elapsed:.1f} s against a loopback upstream")
    return EXIT_OK


# -- shared ------------------------------------------------------------------------------------


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    # As the Python docs advise for SIGPIPE: point stdout at devnull so the interpreter's
    # final flush does not raise a second BrokenPipeError.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
    finally:
        os.close(devnull)
