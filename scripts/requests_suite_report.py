"""Compare the two runs of scripts/requests-suite and say whether they agree.

Usage: ``python requests_suite_report.py PLAIN.json RESILIENT.json``. Prints one summary line
per run, then every test whose outcome differs, and exits 1 when the sets of failing test ids
differ (0 when they agree, 2 when a run left no report).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_KINDS = ("passed", "failed", "skipped")
# A test this much slower under ResilientSession is listed, so retry waits are visible.
_SLOWER_BY = 1.0


def _load(path: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def _summary(name: str, outcomes: dict[str, dict[str, Any]]) -> str:
    counts = Counter(entry["outcome"] for entry in outcomes.values())
    parts = ", ".join(f"{counts[kind]} {kind}" for kind in _KINDS)
    return f"requests-suite: {name}: {parts}"


def _failing(outcomes: dict[str, dict[str, Any]]) -> set[str]:
    return {nodeid for nodeid, entry in outcomes.items() if entry["outcome"] == "failed"}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = {"plain": _load(argv[0]), "resilient": _load(argv[1])}
    for name, data in runs.items():
        if data is None or not data.get("outcomes"):
            print(f"requests-suite: {name}: no results (the run did not finish)")
            return 2
    plain = runs["plain"]["outcomes"]  # type: ignore[index]
    resilient = runs["resilient"]["outcomes"]  # type: ignore[index]
    print(_summary("plain", plain))
    print(_summary("resilient", resilient))

    counts = runs["resilient"]["counts"]  # type: ignore[index]
    built, swapped = counts.get("sessions", 0), counts.get("resilient_sessions", 0)
    print(
        f"requests-suite: swap: {swapped} of {built} sessions were ResilientSession, "
        f"{counts.get('resilient_sends', 0)} sends went through ResilientAdapter"
    )

    for nodeid in sorted(set(plain) | set(resilient)):
        before = plain.get(nodeid, {}).get("outcome", "absent")
        after = resilient.get(nodeid, {}).get("outcome", "absent")
        if before != after:
            print(f"requests-suite: differs: {nodeid}: plain {before}, resilient {after}")
    slower = sorted(
        (
            (resilient[nodeid]["seconds"] - plain[nodeid]["seconds"], nodeid)
            for nodeid in set(plain) & set(resilient)
        ),
        reverse=True,
    )
    for extra, nodeid in slower[:8]:
        if extra >= _SLOWER_BY:
            print(f"requests-suite: slower by {extra:.1f} s under ResilientSession: {nodeid}")

    only_resilient = _failing(resilient) - _failing(plain)
    only_plain = _failing(plain) - _failing(resilient)
    if swapped == 0 or swapped != built:
        print("requests-suite: FAIL: the swap did not cover every session")
        return 1
    if only_resilient or only_plain:
        print(
            f"requests-suite: FAIL: {len(only_resilient)} tests fail only with ResilientSession, "
            f"{len(only_plain)} only with requests.Session"
        )
        return 1
    print("requests-suite: OK: both runs fail the same tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
