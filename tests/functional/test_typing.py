"""The verbs keep requests' keyword types under mypy, with deadline: float | None beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

SNIPPET = """\
from resilient_session import ResilientSession

session = ResilientSession()
session.get("https://api.example.com/items", header={"X-A": "1"})
session.get("https://api.example.com/items", timeout="soon")
session.post("https://api.example.com/items", json={"a": 1}, deadline="2")
session.request("GET", "https://api.example.com/items", deadline="soon")
ok = session.get(
    "https://api.example.com/items",
    params={"page": 2},
    headers={"X-A": "1"},
    timeout=(3.05, 27),
    deadline=2.0,
)
also = session.request("GET", "https://api.example.com/items", deadline=None)
reveal_type(ok)
reveal_type(session.put)
reveal_type(session.request)
"""


# What mypy reveals at the end of each verb's type: requests' keywords, then ours.
VERB_TAIL = (
    "deadline: float | None =, resilience: typing.Mapping[str, Any] | None =) "
    '-> requests.models.Response"'
)


def test_mypy_catches_what_it_catches_on_requests_session(tmp_path: Path) -> None:
    """mypy reports a misspelt keyword and a bad timeout or deadline, and accepts a correct
    call; no signature shows the private sentinel's type."""
    source = tmp_path / "snippet.py"
    source.write_text(SNIPPET)
    out, err, _status = mypy_api.run(
        [
            "--strict",
            "--no-error-summary",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(source),
        ]
    )
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(source))]
    errors = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    assert errors == {4, 5, 6, 7}, out + err
    assert 'Unexpected keyword argument "header"' in out
    assert 'Argument "timeout" to "get" of "TypedVerbs" has incompatible type "str"' in out
    assert 'Argument "deadline" to "post" of "TypedVerbs" has incompatible type "str"' in out
    revealed = [line for line in lines if line.startswith("note: Revealed type")]
    assert revealed[0] == 'note: Revealed type is "requests.models.Response"'
    assert revealed[1].endswith(VERB_TAIL)
    assert revealed[2].endswith(VERB_TAIL)
    assert "_Unset" not in out


MODULE_SNIPPET = """\
import resilient_session

resilient_session.get("https://api.example.com/items", header={"X-A": "1"})
resilient_session.post("https://api.example.com/items", json={"a": 1}, deadline="2")
resilient_session.request("GET", "https://api.example.com/items", timeout="soon")
ok = resilient_session.get("https://api.example.com/items", {"page": 2}, deadline=2.0)
resilient_session.post("https://api.example.com/items", {"a": "b"}, timeout=(3.05, 27))
resilient_session.head("https://api.example.com/items", deadline=None)
reveal_type(ok)
reveal_type(resilient_session.put)
"""


def test_module_verbs_are_typed_as_requests_module_verbs(tmp_path: Path) -> None:
    """The module verbs take requests' keywords with their types, ``deadline`` beside them, and
    ``get`` its params second, as ``requests.get``."""
    source = tmp_path / "module_snippet.py"
    source.write_text(MODULE_SNIPPET)
    out, err, _status = mypy_api.run(
        [
            "--strict",
            "--no-error-summary",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(source),
        ]
    )
    errors = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    assert errors == {3, 4, 5}, out + err
    assert 'Unexpected keyword argument "header"' in out
    revealed = [line for line in out.splitlines() if "Revealed type" in line]
    assert revealed[0].endswith('Revealed type is "requests.models.Response"')
    assert revealed[1].endswith(VERB_TAIL)
    assert "_Unset" not in out
