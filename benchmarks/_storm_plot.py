"""The storm benchmark's two figures: a timeline per run and stack, and the brownout curves."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SHADES = {"open": ("#d62728", 0.18), "half_open": ("#ff7f0e", 0.25)}


@dataclass(frozen=True)
class Series:
    """One stack under one run, binned: what the timeline draws in one panel."""

    run: str
    stack: str
    width: float  # seconds per bin
    offered: list[int]  # calls issued per bin
    tries: list[int]  # tries the upstream saw per bin
    fault: tuple[float, float]
    states: list[tuple[float, str]]  # (seconds, breaker state)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(
    series: Sequence[Series], runs: Sequence[str], stacks: Sequence[str], path: Path, rate: float
) -> None:
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    figure, axes = plt.subplots(
        len(stacks),
        len(runs),
        figsize=(4.6 * len(runs), 1.9 * len(stacks)),
        sharey="row",
        squeeze=False,
    )
    for one in series:
        column, row = runs.index(one.run), stacks.index(one.stack)
        axis = axes[row][column]
        xs = [i * one.width for i in range(len(one.offered))]
        axis.axvspan(*one.fault, color="#7f7f7f", alpha=0.12, lw=0)
        for state_start, state_end, state in _spans(one.states):
            if state in _SHADES:
                color, alpha = _SHADES[state]
                axis.axvspan(state_start, state_end, color=color, alpha=alpha, lw=0)
        # Drawn wide and first, so it shows where the tries line runs on top of it.
        axis.step(xs, one.offered, where="post", color="#1f77b4", lw=2.4, alpha=0.55)
        axis.step(xs, one.tries, where="post", color="#2ca02c", lw=1.0)
        axis.set_xlim(0, xs[-1] if xs else 1)
        if row == 0:
            axis.set_title(one.run, fontsize=10)
        if column == 0:
            axis.set_ylabel(one.stack, fontsize=9)
        if row == len(stacks) - 1:
            axis.set_xlabel("seconds", fontsize=8)
        axis.tick_params(labelsize=7)
    width = series[0].width if series else 0.1
    handles = [
        Line2D(
            [],
            [],
            color="#1f77b4",
            lw=2.4,
            alpha=0.55,
            label=f"calls offered per {width * 1000:g} ms",
        ),
        Line2D([], [], color="#2ca02c", label=f"upstream tries per {width * 1000:g} ms"),
        Patch(color="#7f7f7f", alpha=0.25, label="fault window"),
        Patch(color="#d62728", alpha=0.3, label="breaker open"),
        Patch(color="#ff7f0e", alpha=0.4, label="breaker half-open"),
    ]
    figure.suptitle(
        f"Calls offered vs tries the upstream saw, {rate:g} calls/s per stack in the outages "
        "(y scale shared along each row)",
        y=0.995,
        fontsize=11,
    )
    figure.legend(
        handles=handles,
        loc="upper center",
        ncol=5,
        fontsize=9,
        frameon=False,
        bbox_to_anchor=(0.5, 0.975),
    )
    figure.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def plot_brownout(
    points: Sequence[tuple[str, float, float, float]],
    stacks: Sequence[str],
    path: Path,
    rate: float,
    bound: float,
) -> None:
    """*points* are (stack, failure rate p, goodput, tries per call); *bound* is the most tries
    per call the product's target allows."""
    plt = _pyplot()
    figure, (good, tries) = plt.subplots(1, 2, figsize=(11, 4.2))
    markers = itertools.cycle("osD^v")
    for stack in stacks:
        mine = sorted((p, g, t) for name, p, g, t in points if name == stack)
        marker = next(markers)
        ps = [p for p, _, _ in mine]
        good.plot(ps, [g * 100 for _, g, _ in mine], marker=marker, label=stack)
        tries.plot(ps, [t for _, _, t in mine], marker=marker, label=stack)
    shares = sorted({p for _, p, _, _ in points})
    good.plot(
        shares,
        [(1 - p) * 100 for p in shares],
        color="#7f7f7f",
        ls=":",
        lw=1,
        label="1 - p (one try each)",
    )
    tries.axhline(bound, color="#7f7f7f", ls="--", lw=1, label=f"target: {bound:g}")
    good.set_ylabel("goodput: calls that succeeded (%)")
    tries.set_ylabel("tries the upstream saw per call")
    for axis in (good, tries):
        axis.set_xlabel("share of requests answered 503 (p)")
        axis.set_xticks(shares)
        axis.grid(alpha=0.3)
    good.set_ylim(0, 102)
    tries.set_ylim(bottom=0)
    good.legend(fontsize=8)
    tries.legend(fontsize=8)
    figure.suptitle(f"Random-503 brownouts, {rate:g} calls/s per stack", fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _spans(states: Sequence[tuple[float, str]]) -> list[tuple[float, float, str]]:
    spans: list[tuple[float, float, str]] = []
    for (at, state), (following, _) in itertools.pairwise(states):
        if spans and spans[-1][2] == state and abs(spans[-1][1] - at) < 1e-9:
            spans[-1] = (spans[-1][0], following, state)
        else:
            spans.append((at, following, state))
    return spans
