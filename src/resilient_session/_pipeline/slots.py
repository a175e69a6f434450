"""Named slots of a per-try chain: its stages by name, outermost first, so a chain built from
another (hedging's racing chains from the standard one) is written as edits by name."""

from __future__ import annotations

from collections.abc import Iterable

from .drive import TryStage


class Slots:
    """Try stages by slot name, in nesting order (the first is the outermost).

    A chain derived from another names what it changes ("events" replaced, "race" after
    "deadline"), never a position, so a stage added to the original lands in the derived
    chain at its own place, and a slot that is gone fails the build (``KeyError``) instead of
    shifting what follows it.
    """

    __slots__ = ("_stages",)

    def __init__(self, named: Iterable[tuple[str, TryStage]]) -> None:
        self._stages = dict(named)

    def names(self) -> list[str]:
        return list(self._stages)

    def stages(self) -> list[TryStage]:
        return list(self._stages.values())

    def __getitem__(self, name: str) -> TryStage:
        return self._stages[name]

    def _require(self, name: str) -> None:
        if name not in self._stages:
            raise KeyError(f"no slot named {name!r} in {self.names()}")

    def replaced(self, name: str, stage: TryStage) -> Slots:
        """These slots with *stage* in slot *name*; ``KeyError`` when there is none."""
        self._require(name)
        return Slots((slot, stage if slot == name else kept) for slot, kept in self._stages.items())

    def inserted_after(self, anchor: str, name: str, stage: TryStage) -> Slots:
        """These slots with *stage*, as slot *name*, just inside slot *anchor*; ``KeyError``
        when there is no *anchor*, ``ValueError`` when *name* is taken."""
        self._require(anchor)
        if name in self._stages:
            raise ValueError(f"a slot named {name!r} is already in the chain")
        named: list[tuple[str, TryStage]] = []
        for slot, kept in self._stages.items():
            named.append((slot, kept))
            if slot == anchor:
                named.append((name, stage))
        return Slots(named)
