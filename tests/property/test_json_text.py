"""``json_text.loads`` is ``json.loads``: the same value (NaN, infinities, duplicate keys,
deep nesting, big numbers included) or the same exception, for any text, JSON or not.
A control shows the comparison catches a reader that takes trailing text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuum import json_text

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)
spaces = st.text(alphabet=" \t\n\r\x0b\x0c\u00a0", max_size=3)
# Texts near JSON: a document cut, padded, doubled or spliced with JSON's own characters.
noise = st.text(alphabet='{}[]",:0123456789.eE+-tfnrueals NaIiy\\/\t\n\x00\ufeff', max_size=12)


def outcome(read: Any, text: str) -> tuple[str, Any]:
    try:
        return "value", _comparable(read(text))
    except Exception as e:  # the exact exception and message must match
        return "raised", (type(e).__name__, str(e))


def _comparable(value: Any) -> Any:
    """NaN != NaN: compare its text; a float and an int stay apart."""
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return (type(value).__name__, value)


@settings(max_examples=1500, deadline=None)
@given(values, spaces, spaces, st.integers(0, 3))
def test_a_json_document_reads_as_json_loads_reads_it(
    value: Any, before: str, after: str, cut: int
) -> None:
    text = before + json.dumps(value) + after
    for t in (text, text[: len(text) - cut], text + text, json.dumps(value, indent=1)):
        assert outcome(json_text.loads, t) == outcome(json.loads, t)


@settings(max_examples=1500, deadline=None)
@given(noise)
def test_any_text_reads_or_fails_as_json_loads(text: str) -> None:
    assert outcome(json_text.loads, text) == outcome(json.loads, text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        "[1e400, -1e400]",
        "NaN",
        '"\\ud800"',
        "[" * 100_000 + "]" * 100_000,
        '{"a": "\x01"}',
        "\ufeff{}",
        " 12 ",
        "1 2",
        "",
        "  ",
        "[]x",
        '"unterminated',
    ],
)
def test_the_edges_read_or_fail_as_json_loads(text: str) -> None:
    assert outcome(json_text.loads, text) == outcome(json.loads, text)


def test_it_needs_neither_json_nor_re(tmp_path: Any) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from continuum.json_text import loads\n"
        "assert loads(' {\"a\": [1, 2.5, null, true]} ') == {'a': [1, 2.5, None, True]}\n"
        "print(sorted(m for m in ('json', 're') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_control_a_reader_that_takes_trailing_text_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def lax(text: str) -> Any:
        return json.JSONDecoder().raw_decode(text.strip())[0]

    assert outcome(lax, "[1] x") != outcome(json.loads, "[1] x")


def dumped(write: Any, value: Any) -> tuple[str, Any]:
    try:
        return "text", write(value)
    except Exception as e:
        return "raised", (type(e).__name__, str(e))


@settings(max_examples=1500, deadline=None)
@given(values | st.tuples(values, values) | st.dictionaries(st.integers(), scalars, max_size=2))
def test_a_value_is_written_as_json_dumps_writes_it_sorted(value: Any) -> None:
    def reference(v: Any) -> str:
        return json.dumps(v, sort_keys=True, ensure_ascii=False)

    assert dumped(json_text.dumps_sorted, value) == dumped(reference, value)


@pytest.mark.parametrize(
    "value", [object(), {"a": {1, 2}}, {1: "a", "b": 2}, [float("nan")], '\u2028\x00"\\']
)
def test_the_edges_are_written_or_refused_as_json_dumps(value: Any) -> None:
    def reference(v: Any) -> str:
        return json.dumps(v, sort_keys=True, ensure_ascii=False)

    assert dumped(json_text.dumps_sorted, value) == dumped(reference, value)


def test_a_cycle_is_refused_as_json_dumps_refuses_it() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert dumped(json_text.dumps_sorted, loop) == dumped(
        lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False), loop
    )
