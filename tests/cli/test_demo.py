"""The demo: every scene's decision and reason, its live events, and the command's table."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import structlog

from resilient_session.cli import main
from resilient_session.cli.demo import SceneResult, run_demo

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text("utf-8")
)


@pytest.fixture(scope="module")
def played() -> tuple[list[SceneResult], list[dict[str, Any]]]:
    """One run of the demo: its scene results and every JSON line it streamed."""
    stream = io.StringIO()
    scenes = run_demo(stream)
    return scenes, [json.loads(line) for line in stream.getvalue().splitlines()]


def _calls(scene: SceneResult) -> list[tuple[str, int, str, str, str]]:
    return [(c.label, c.tries, c.decision, c.reason, c.result) for c in scene.calls]


def test_tries_shown_are_the_requests_the_upstream_saw(played):
    """Each scene's tries add up to the requests its upstream saw: a try refused locally is
    counted as refused, never as a try (docs/events.md). In the two-hop scene the upstream is
    C, which B's calls reach."""
    scenes, _ = played
    shown = [sum(call.tries for call in scene.calls) for scene in scenes[:11]]
    assert shown == [scene.upstream_hits for scene in scenes[:11]]
    hops = scenes[11].calls
    assert hops[1].tries + hops[3].tries == scenes[11].upstream_hits == 14
    # The refused in the table are the ones health() counted, which the notes quote.
    assert f"{scenes[8].calls[0].refused} tries throttled" in scenes[8].note
    assert f"refused {scenes[9].calls[0].refused} tries locally" in scenes[9].note
    assert scenes[7].calls[1].refused == 1
    assert sum(call.refused for scene in scenes[:8] for call in scene.calls) == 1


def test_every_scene_ends_with_its_decision_and_reason(played):
    """Each of the 8 scenes of one-off calls ends as the contract says, with the exact number
    of tries."""
    scenes, _ = played
    assert [_calls(scene) for scene in scenes[:8]] == [
        [("GET /flaky", 3, "success", "ok", "200 OK")],
        [("GET /throttled", 2, "success", "ok", "200 OK")],
        [("GET /busy", 1, "give_up", "retry_after_too_long", "503 Service Unavailable")],
        [("POST /orders", 1, "give_up", "not_idempotent", "502 Bad Gateway")],
        [("POST /payments + key", 2, "success", "ok", "201 Created")],
        [("GET /slow, deadline 0.5 s", 2, "give_up", "deadline", "DeadlineExceeded")],
        [("10x GET /down", 13, "give_up", "budget_exhausted", "10x 503 Service Unavailable")],
        [
            ("GET /fragile", 2, "give_up", "breaker_open", "500 Internal Server Error"),
            ("GET /fragile", 0, "fail_fast", "breaker_open", "CircuitOpenError"),
            ("GET /fragile, 0.5 s later", 1, "success", "ok", "200 OK"),
        ],
    ]


def test_scene_figures(played):
    """Retry-After 1 is waited exactly; the budget holds 10 calls to 13 upstream hits, not 40."""
    scenes, _ = played
    assert scenes[1].calls[0].waits == (1.0,)
    assert [scene.upstream_hits for scene in scenes[:8]] == [3, 2, 1, 1, 2, 2, 13, 3]
    assert scenes[6].calls[0].calls == 10
    assert "13 requests for 10 calls; 40 without a retry budget" in scenes[6].note
    assert 0.5 <= scenes[5].calls[0].elapsed < 1.0
    breaker = scenes[7].calls
    assert [call.transitions for call in breaker] == [
        ("closed->open",),
        (),
        ("open->half_open", "half_open->closed"),
    ]


def _served(result: str) -> int:
    """How many calls of a summed row ended in a 200: ``55x 200 OK, 37x 503 ...`` gives 55."""
    counts = dict(part.split("x ", 1)[::-1] for part in result.split(", "))
    return int(counts.get("200 OK", 0))


def test_brownouts_keep_serving_and_spare_the_upstream(played):
    """Half the tries failing at random: the breaker never opens, more than half the calls are
    served, and the budget holds the upstream to at most 1 + ratio tries a call plus the
    bucket's 10. Nine in ten failing: the throttle refuses most tries, so the upstream sees
    fewer requests than calls."""
    scenes, events = played
    half, heavy = scenes[8].calls[0], scenes[9].calls[0]
    assert (half.calls, heavy.calls) == (100, 100)
    assert _served(half.result) > 50
    assert 100 <= scenes[8].upstream_hits <= 100 + 20 + 10
    assert "the breaker never opens" in scenes[8].note
    # Scene 8 opens, probes and closes its breaker; the next three are scene 13's.
    transitions = [e for e in events if e.get("event") == "breaker.transition"]
    assert len(transitions) == 6
    assert [e["to"] for e in transitions[3:]] == ["open", "half_open", "closed"]
    refused = heavy.refused
    assert refused >= 60
    assert scenes[9].upstream_hits < 60
    assert f"the throttle refused {refused} tries locally" in scenes[9].note


def test_hang_is_held_to_the_limit(played):
    """Twelve calls at once to a hanging host: the limit of 4 lets 4 tries through, which time
    out; the other 8 wait 0.2 s for a slot and fail fast, well before the read timeout."""
    scenes, _ = played
    [hang] = scenes[10].calls
    assert (hang.calls, hang.tries, hang.refused, scenes[10].upstream_hits) == (12, 4, 8, 4)
    assert hang.result == "8x ConcurrencyLimitError, 4x ReadTimeout"
    assert (hang.decision, hang.reason) == ("fail_fast", "concurrency_limit")
    assert hang.elapsed < 1.0


def test_two_hops_retry_at_one_layer(played):
    """A -> B -> C with C down, three tries a call at A and B: with B wrapped in the middleware
    C sees 1 + 1 + 3 = 5 requests (B's calls on A's first two tries give up with
    caller_retries), without it 3 x 3 = 9."""
    scenes, _ = played
    hops = scenes[11]
    assert _calls(hops) == [
        ("A: GET B/hop, B wrapped", 3, "give_up", "max_attempts", "503 Service Unavailable"),
        ("B: its 3 calls to C", 5, "give_up", "max_attempts", "503 Service Unavailable"),
        ("A: GET B/hop, B bare", 3, "give_up", "max_attempts", "503 Service Unavailable"),
        ("B: its 3 calls to C", 9, "give_up", "max_attempts", "503 Service Unavailable"),
    ]
    assert hops.upstream_hits == 5 + 9
    assert "C saw 5 requests for the user's call with B wrapped" in hops.note
    assert "9 without (3 x 3)" in hops.note


def test_streamed_events_are_valid_json_lines(played):
    """One http.try per try and per refusal of every scene, 6 breaker.transition lines and 3
    http.fallback lines stream, each valid against the schema."""
    scenes, events = played
    kinds = [event["event"] for event in events]
    assert kinds.count("demo.scene") == 13
    calls = [call for scene in scenes for call in scene.calls]
    assert kinds.count("http.try") == sum(call.tries + call.refused for call in calls)
    fail_fasts = [e for e in events if e["event"] == "http.try" and e["decision"] == "fail_fast"]
    assert len(fail_fasts) == sum(call.refused for call in calls) > 0
    assert kinds.count("breaker.transition") == 6
    assert kinds.count("http.fallback") == 3
    validator = jsonschema.Draft202012Validator(SCHEMA)
    ours = [event for event in events if event["event"] != "demo.scene"]
    assert [error.message for e in ours for error in validator.iter_errors(e)] == []


def test_demo_leaves_structlog_as_it_found_it():
    """After the demo an unconfigured structlog is unconfigured again: the app's choice stands."""
    assert not structlog.is_configured()
    run_demo(io.StringIO())
    assert not structlog.is_configured()


def test_demo_command_with_stdout_flag(capsys):
    """demo --stdout puts events and the closing table on stdout, nothing on stderr; exit 0."""
    assert main(["demo", "--stdout"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    table = lines[lines.index("") + 1 :]
    assert table[0].split()[:4] == ["scene", "call", "tries", "refused"]
    events = sum(1 for line in lines if line.startswith('{"method"'))
    assert events > 28 + 12
    assert table[-1].startswith("13 scenes in ")


def test_demo_subprocess_finishes_fast_with_a_table():
    """python -m resilient_session demo exits 0 in under 20 s; events on stderr, table on stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "resilient_session", "demo"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0
    assert "Traceback" not in done.stderr
    stderr = [json.loads(line) for line in done.stderr.splitlines()]
    assert sum(1 for event in stderr if event["event"] == "http.try") > 28 + 12
    expected = [
        ("1 503 retried to success", "success", "ok"),
        ("2 429 Retry-After honoured", "success", "ok"),
        ("3 Retry-After over the cap", "give_up", "retry_after_too_long"),
        ("4 POST sent once", "give_up", "not_idempotent"),
        ("5 POST + Idempotency-Key retried", "success", "ok"),
        ("6 deadline cuts a hang", "give_up", "deadline"),
        ("7 outage: budget holds retries", "give_up", "budget_exhausted"),
        ("8 breaker opens, probes, closes", "give_up", "breaker_open"),
        ("11 hang held by the limit", "fail_fast", "concurrency_limit"),
        ("12 two hops: one layer retries", "give_up", "max_attempts"),
        ("13 host down: stale answers stand in", "success", "ok"),
    ]
    for start, decision, reason in expected:
        words = _row(done.stdout, start)
        # From the right: a scene's title may contain the decision's word too.
        at = len(words) - 1 - words[::-1].index(decision)
        assert words[at + 1] == reason, start
    assert done.stdout.splitlines()[-1].startswith("13 scenes in ")


def _row(table: str, start: str) -> list[str]:
    """The words of the one line of *table* that starts with *start*."""
    [line] = [line for line in table.splitlines() if line.startswith(start)]
    return line.split()


def test_a_host_down_is_answered_stale_then_recovers(played):
    """Scene 13: one fresh answer, three calls to the host while down answered with it (two
    503s, then a call the open breaker refused), marked; then the host's next answer."""
    scenes, _ = played
    scene = scenes[12]
    assert _calls(scene) == [
        ("GET /prices, host up", 1, "success", "ok", "200 OK"),
        (
            "3x GET /prices, host down",
            2,
            "fail_fast",
            "breaker_open",
            "2x 200 OK (stale, max_attempts), 1x 200 OK (stale, breaker_open)",
        ),
        ("GET /prices, 0.2 s later", 1, "success", "ok", "200 OK"),
    ]
    assert scene.calls[1].refused == 1
    assert scene.calls[2].transitions == ("open->half_open", "half_open->closed")
    assert scene.upstream_hits == 4
