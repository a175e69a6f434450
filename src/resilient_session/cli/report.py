"""Human-readable tables for the command line: the stats summary and the demo's scenes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from resilient_session._observe.printable import printable
from resilient_session._observe.redact import redact_store_url

if TYPE_CHECKING:
    from resilient_session.config.policy import StatePolicy

    from .demo import SceneResult


_COLUMNS = [
    "host",
    "calls",
    "tries",
    "tries/call",
    "refused",
    "retries",
    "hedges",
    "ok",
    "give-ups",
    "trips",
    "p50 total",
    "p99 total",
]

# The row that sums the hosts past the per-host limit: parenthesised, unlike a host key.
OTHER_HOSTS = "(other hosts)"


def stats_text(summary: dict[str, Any]) -> str:
    """The per-host table, then give-ups, fail-fasts and transitions by reason.

    Every host, reason and transition name came from the input, so each goes through
    :func:`printable`: a host key in a log cannot recolour or rewrite the reader's terminal.
    """
    # Pairs, not a dict: two hosts may print alike ("\x1b" escaped, and those four characters).
    hosts = [(printable(host), figures) for host, figures in summary["hosts"].items()]
    if summary["other_hosts"] is not None:
        hosts.append((OTHER_HOSTS, summary["other_hosts"]))
    rows = [
        [
            host,
            figures["calls"],
            figures["tries"],
            _number(figures["tries_per_call"], "{:.2f}"),
            figures["refused"],
            figures["retries"],
            figures["hedges"],
            figures["successes"],
            sum(figures["give_ups"].values()),
            figures["breaker_trips"],
            _number(figures["total_p50"], "{:.3f} s"),
            _number(figures["total_p99"], "{:.3f} s"),
        ]
        for host, figures in hosts
    ]
    lines = _table(_COLUMNS, rows) if rows else ["no events"]
    if summary["other_hosts"] is not None:
        lines += [
            f"{OTHER_HOSTS}: about {summary['hosts_folded']:,} more hosts, past the first "
            f"{summary['max_hosts']:,} seen, share this row"
        ]
    for title, key in (
        ("give-ups by reason", "give_ups"),
        ("refused (fail-fasts) by reason", "fail_fasts"),
        ("breaker transitions", "breaker_transitions"),
    ):
        details = [(host, figures[key]) for host, figures in hosts if figures[key]]
        if details:
            lines += ["", title]
            lines += [f"  {host}  {_counts(counts)}" for host, counts in details]
    state = summary["state"]
    if state["degraded"] or state["restored"]:
        lines += [
            "",
            f"shared state (redis backend): {state['degraded']} times degraded to local "
            f"state, {state['restored']} times restored",
        ]
    skipped = summary["skipped"]
    lines += [
        "",
        f"{summary['lines']} lines read, {summary['used']} used, {skipped['total']} skipped "
        f"({skipped['not_json']} not JSON, {skipped['too_long']} too long, "
        f"{skipped['other_event']} other events, {skipped['malformed']} malformed); "
        f"p50/p99 of each call's final try, within {summary['relative_error']:.0%}",
    ]
    return "\n".join(lines)


def state_text(policy: StatePolicy) -> str:
    """Where a configuration keeps breakers, budgets and throttle windows, in one line."""
    if policy.backend == "memory":
        return "state: memory (each process keeps its own breakers, budgets and throttles)"
    # The URL may carry a password: never printed.
    url = printable(redact_store_url(policy.url))
    where = f"redis at {url}"
    if policy.mode == "cluster":
        where = f"redis cluster from {url}"
    elif policy.mode == "sentinel":
        sentinels = ", ".join(f"{host}:{port}" for host, port in policy.sentinels)
        where = (
            f"redis master {printable(repr(policy.service_name))} named by sentinels "
            f"{printable(sentinels)}"
        )
    return (
        f"state: {where}, key prefix {printable(repr(policy.key_prefix))}, "
        f"timeout {policy.timeout_ms} ms, sync every {policy.sync_interval_ms} ms "
        "(breakers, budgets and throttles shared by every process using it)"
    )


def _table(
    header: list[str], rows: list[list[Any]], text_columns: tuple[int, ...] = (0,)
) -> list[str]:
    cells = [header, *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    # Text is left-aligned and figures right-aligned, so digits line up by place value.
    return [
        "  ".join(
            cell.ljust(widths[i]) if i in text_columns else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in cells
    ]


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{printable(name)}={count}" for name, count in counts.items())


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else spec.format(value)


def demo_text(scenes: Sequence[SceneResult]) -> str:
    """One row per call of each scene, then a note per scene with the upstream's counts.

    ``tries`` counts the tries sent toward the upstream; a try a local guard refused is in
    ``refused`` instead, as docs/events.md defines them.
    """
    header = ["scene", "call", "tries", "refused", "waits", "decision", "reason", "result"]
    rows: list[list[Any]] = []
    for scene in scenes:
        for index, call in enumerate(scene.calls):
            name = f"{scene.number} {scene.title}" if index == 0 else ""
            result = call.result
            if call.transitions:
                states = [call.transitions[0].split("->")[0]]
                states += [transition.split("->")[1] for transition in call.transitions]
                result += f", breaker {' -> '.join(states)}"
            row = [name, call.label, call.tries, call.refused, _waits(call.waits)]
            rows.append([*row, call.decision, call.reason, result])
    notes = [f"  {scene.number}. {scene.note}" for scene in scenes]
    return "\n".join([*_table(header, rows, text_columns=(0, 1, 4, 5, 6, 7)), "", *notes])


def _waits(waits: Sequence[float]) -> str:
    if not waits:
        return "-"
    if len(waits) <= 3:
        return " + ".join(_duration(wait) for wait in waits)
    return f"{len(waits)} waits, {_duration(sum(waits))}"


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"
