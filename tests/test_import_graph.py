"""The package's imports point one way: no cycle, each room imports only itself and the rooms
below it (docs/architecture.md, "Where things live")."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import resilient_session

PACKAGE = "resilient_session"
ROOT = Path(resilient_session.__file__).resolve().parent

# Top to bottom; a module may import its own layer and the layers below it. A name is a module
# or a package (a package's prefix covers its submodules).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("resilient_session", "resilient_session.__main__"),
    ("resilient_session.cli",),
    ("resilient_session.testing",),
    (
        "resilient_session.inbound",
        "resilient_session.session",
        "resilient_session._verbs",
        "resilient_session._adopted_adapters",
        "resilient_session._api",
        # httpx's clients and transport, beside the session they share a registry with.
        "resilient_session.httpx",
    ),
    ("resilient_session.adapter",),
    # A transport implements the port the decisions define (_pipeline/wire.py): it sits
    # above them, and they name no transport (test_the_decision_rooms_import_no_transport).
    ("resilient_session._transport",),
    ("resilient_session._pipeline",),
    ("resilient_session._state",),
    ("resilient_session.config",),
    ("resilient_session._observe",),
    (
        "resilient_session.errors",
        "resilient_session.clock",
        "resilient_session.deadline",
        "resilient_session._compat",
        "resilient_session._hops",
    ),
)

# The few imports allowed against the layers, each with its reason.
EXCEPTIONS: Mapping[tuple[str, str], str] = {
    # `resilient-session --version`: the version is computed once, in the package itself.
    ("resilient_session.cli", "resilient_session"): "__version__",
}

# The decision rooms name no transport: what they ask of one goes through the wire
# (_pipeline/wire.py), so a second transport reuses every decision as it is.
DECISION_ROOMS = ("resilient_session._pipeline", "resilient_session._state")
TRANSPORT_NAMES = ("requests", "urllib3", "httpx", "httpcore", "resilient_session._transport")

# Inside _state, only the factory names the fleet backend (imported when selected).
FLEET = "resilient_session._state.fleet"
FLEET_IMPORTERS = frozenset({"resilient_session._state.backend"})

STUB_MARK = "Re-export:"
MAX_TOP_LEVEL = 12
# What a loopback test server is built on: they live in resilient_session.testing.
SERVER_MODULES = frozenset({"socketserver", "http.server", "wsgiref.simple_server"})


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_sources() -> dict[str, tuple[str, bool]]:
    """Every module of the package: its source and whether it is a package ``__init__``."""
    return {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(ROOT.rglob("*.py"))
    }


def is_stub(source: str) -> bool:
    """A short re-export module left behind where a documented path moved."""
    docstring = ast.get_docstring(ast.parse(source)) or ""
    return docstring.startswith(STUB_MARK)


def _imported(tree: ast.Module, name: str, is_package: bool) -> Iterable[tuple[str, str]]:
    """(module, name) pairs for every import anywhere in *tree*, relative ones resolved; name
    is "" for ``import x.y``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                yield base, alias.name


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from pkg import sub`` points at sub)."""
    graph: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        edges = graph.setdefault(name, set())
        for module, imported in _imported(ast.parse(source), name, is_package):
            target = f"{module}.{imported}" if f"{module}.{imported}" in sources else module
            while target not in sources and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in sources and target != name:
                edges.add(target)
    return graph


def layer_of(module: str) -> int:
    """The index of *module*'s layer in LAYERS (0 is the top)."""
    best, best_len = -1, -1
    for index, names in enumerate(LAYERS):
        for prefix in names:
            covers = module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
            if covers and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


def _owner(module: str, names: Iterable[str]) -> str | None:
    return next((n for n in names if module == n or module.startswith(n + ".")), None)


def violations(graph: Mapping[str, set[str]], stubs: frozenset[str]) -> list[str]:
    """Every import against the layer rule, as ``importer -> imported`` lines."""
    found = []
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            if target in stubs:
                found.append(f"{importer} -> {target} (a re-export stub)")
                continue
            if importer in stubs or importer == PACKAGE:
                continue
            exception = (_owner(importer, [k[0] for k in EXCEPTIONS]) or importer, target)
            if exception in EXCEPTIONS:
                continue
            if layer_of(target) < layer_of(importer):
                found.append(f"{importer} -> {target}")
            elif (
                target.startswith(FLEET)
                and importer.startswith("resilient_session._state")
                and not importer.startswith(FLEET)
                and importer not in FLEET_IMPORTERS
            ):
                found.append(f"{importer} -> {target} (only the factory names the fleet)")
    return found


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def _graph_and_stubs() -> tuple[dict[str, set[str]], frozenset[str]]:
    sources = read_sources()
    stubs = frozenset(name for name, (source, _) in sources.items() if is_stub(source))
    return import_graph(sources), stubs


def test_no_import_cycle() -> None:
    """No module reaches itself through imports, TYPE_CHECKING and function-level ones included."""
    graph, _ = _graph_and_stubs()
    assert len(graph) > 50
    assert find_cycle(graph) is None


def test_imports_point_down_the_layers() -> None:
    """Each module imports only its own layer and the layers below, save the named exceptions."""
    graph, stubs = _graph_and_stubs()
    assert violations(graph, stubs) == []


def test_the_rule_catches_a_planted_upward_import_and_cycle() -> None:
    """An upward import (state -> pipeline) and the cycle it closes are both reported."""
    graph, stubs = _graph_and_stubs()
    planted = {k: set(v) for k, v in graph.items()}
    planted["resilient_session._state.registry"].add("resilient_session._pipeline.attempt")
    planted["resilient_session._observe.events"].add("resilient_session.cli")
    assert violations(planted, stubs) == [
        "resilient_session._observe.events -> resilient_session.cli",
        "resilient_session._state.registry -> resilient_session._pipeline.attempt",
    ]
    cycle = find_cycle(planted)
    assert cycle is not None
    assert cycle[0] == cycle[-1]


def test_relative_and_submodule_imports_resolve() -> None:
    """``from . import sub`` and ``from ..x import y`` inside a package resolve to modules."""
    sources = {
        "resilient_session": ("", True),
        "resilient_session.a": ("", True),
        "resilient_session.a.b": ("from . import c\nfrom ..d import thing\n", False),
        "resilient_session.a.c": ("", False),
        "resilient_session.d": ("def f():\n    import resilient_session.a.c\n", False),
    }
    assert import_graph(sources) == {
        "resilient_session": set(),
        "resilient_session.a": set(),
        "resilient_session.a.b": {"resilient_session.a.c", "resilient_session.d"},
        "resilient_session.a.c": set(),
        "resilient_session.d": {"resilient_session.a.c"},
    }


def test_top_level_is_small_and_holds_no_test_server() -> None:
    """At most 12 modules at the top, stubs aside, and none of them is a loopback server."""
    sources = read_sources()
    top = {
        name: source
        for name, (source, is_package) in sources.items()
        if name.count(".") == 1 and not is_package and not is_stub(source)
    }
    assert len(top) <= MAX_TOP_LEVEL, sorted(top)
    for name, source in top.items():
        imported = {module for module, _ in _imported(ast.parse(source), name, False)}
        assert not imported & SERVER_MODULES, name


def test_stubs_only_re_export() -> None:
    """Each stub is a few lines that import from the package and define ``__all__``."""
    sources = read_sources()
    stubs = {name: source for name, (source, _) in sources.items() if is_stub(source)}
    for name, source in stubs.items():
        tree = ast.parse(source)
        kinds = {type(node).__name__ for node in tree.body}
        assert kinds <= {"Expr", "ImportFrom", "Assign"}, name
        assert any(
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            for node in tree.body
        ), name


def test_the_package_never_imports_the_dev_servers() -> None:
    """devservers/ (the Redis servers the project's own tests start) is not in the wheel: no
    module of the package may name it."""
    for name, (source, is_package) in read_sources().items():
        imported = {module for module, _ in _imported(ast.parse(source), name, is_package)}
        assert not {m for m in imported if m.split(".")[0] == "devservers"}, name


def test_importing_testing_loads_no_server() -> None:
    """``resilient_session.testing`` names its loopback servers lazily: a suite that only fakes
    the clock loads no server code, and the servers are there when first named."""
    code = (
        "import sys, resilient_session.testing as t\n"
        "before = sorted(m for m in sys.modules if m in SERVERS or m.endswith('.upstream'))\n"
        "t.FlakyUpstream, t.Reply, t.LoopbackService\n"
        "after = sorted(m for m in sys.modules if m in SERVERS)\n"
        "print(before, after)\n"
    ).replace("SERVERS", repr(set(SERVER_MODULES)))
    printed = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, check=True, text=True
    ).stdout.strip()
    assert printed == f"[] {sorted(SERVER_MODULES)}"


def transport_imports(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Every import of a transport library or of ``_transport`` by a decision room, as
    ``importer -> imported`` lines (TYPE_CHECKING and function-level imports included)."""
    found = []
    for name, (source, is_package) in sorted(sources.items()):
        if _owner(name, DECISION_ROOMS) is None:
            continue
        for module, _ in _imported(ast.parse(source), name, is_package):
            if _owner(module, TRANSPORT_NAMES) is not None:
                found.append(f"{name} -> {module}")
    return sorted(set(found))


def test_the_decision_rooms_import_no_transport() -> None:
    """_pipeline and _state import neither requests, urllib3, httpx nor _transport."""
    assert transport_imports(read_sources()) == []


def test_the_transport_ban_catches_a_planted_import() -> None:
    """A planted ``import requests`` in a stage, a function-level urllib3 import in the state
    and a TYPE_CHECKING import of _transport are each reported."""
    sources = dict(read_sources())
    stage = "resilient_session._pipeline.stages.breaker"
    source, is_package = sources[stage]
    sources[stage] = ("import requests\n" + source, is_package)
    sources["resilient_session._state.planted"] = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from resilient_session._transport import requests_wire\n"
        "def f():\n"
        "    import urllib3.util\n",
        False,
    )
    assert transport_imports(sources) == [
        f"{stage} -> requests",
        "resilient_session._state.planted -> resilient_session._transport",
        "resilient_session._state.planted -> urllib3.util",
    ]
