"""Canonical JSON (contract §3): sorted keys, no whitespace, UTF-8 kept, no NaN/Infinity."""

from __future__ import annotations

import hashlib
import math

import pytest

from continuum.errors import UsageError
from continuum.eventlog.canonical import (
    canonical_bytes,
    canonical_json,
    digest,
    parse_json,
    sha256_hex,
    text_digest,
)


def test_keys_are_sorted_at_every_depth() -> None:
    value = {"b": 1, "a": {"z": 1, "y": [{"d": 1, "c": 2}]}}
    assert canonical_json(value) == '{"a":{"y":[{"c":2,"d":1}],"z":1},"b":1}'


def test_key_order_of_the_input_does_not_change_the_encoding() -> None:
    assert canonical_json({"x": 1, "y": 2}) == canonical_json({"y": 2, "x": 1})
    assert digest({"x": 1, "y": 2}) == digest({"y": 2, "x": 1})


def test_encoding_has_no_whitespace_between_tokens() -> None:
    assert canonical_json({"a": [1, 2, {"b": None}], "c": True}) == (
        '{"a":[1,2,{"b":null}],"c":true}'
    )


def test_whitespace_inside_strings_is_kept() -> None:
    assert canonical_json({"k": "a b\tc"}) == '{"k":"a b\\tc"}'


def test_non_ascii_text_is_kept_as_utf8_not_escaped() -> None:
    value = {"name": "Zoë", "city": "東京", "emoji": "🙂"}
    text = canonical_json(value)
    assert "Zoë" in text and "東京" in text and "🙂" in text
    assert "\\u" not in text
    assert canonical_bytes(value) == text.encode("utf-8")
    assert canonical_bytes({"k": "é"}) == b'{"k":"\xc3\xa9"}'


def test_digest_is_sha256_of_the_canonical_bytes() -> None:
    value = {"b": [1, 2.5], "a": "é"}
    expected = hashlib.sha256(canonical_bytes(value)).hexdigest()
    assert digest(value) == expected
    assert sha256_hex(canonical_json(value)) == expected


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_with_a_usage_code(bad: float) -> None:
    with pytest.raises(UsageError) as info:
        canonical_json({"outer": [1, {"x": bad}]})
    assert info.value.code == "usage.non_finite_number"


def test_non_finite_number_refusal_also_applies_to_digests() -> None:
    with pytest.raises(UsageError) as info:
        digest({"x": math.nan})
    assert info.value.code == "usage.non_finite_number"


@pytest.mark.parametrize(
    "value",
    [
        {1: "a"},
        {None: "a"},
        {True: "a"},
        {1.5: "a"},
        {"ok": {2: "nested"}},
        [{"x": 1}, {3: 4}],
        {1: "a", "b": 2},
    ],
)
def test_non_string_keys_are_refused_not_coerced(value: object) -> None:
    with pytest.raises(UsageError) as info:
        canonical_json(value)
    assert info.value.code == "usage.non_string_key"


def test_values_json_cannot_hold_are_refused_with_a_usage_code() -> None:
    with pytest.raises(UsageError) as info:
        canonical_json({"s": {1, 2}})
    assert info.value.code == "usage.not_json"


def test_a_lone_surrogate_cannot_be_hashed_and_is_refused_with_a_usage_code() -> None:
    with pytest.raises(UsageError) as info:
        digest({"text": "\ud800"})
    assert info.value.code == "usage.not_utf8"


def test_tuples_encode_like_lists() -> None:
    assert canonical_json({"a": (1, 2)}) == canonical_json({"a": [1, 2]})


def test_finite_floats_and_large_integers_survive_a_round_trip() -> None:
    value = {"f": 0.1, "neg": -0.0, "big": 2**70, "tiny": 5e-324, "e": 1e300}
    back = parse_json(canonical_json(value))
    assert back == value
    assert math.copysign(1.0, back["neg"]) == -1.0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_parse_json_refuses_non_finite_literals(literal: str) -> None:
    with pytest.raises(ValueError):
        parse_json('{"x": ' + literal + "}")


def test_parse_json_reads_what_canonical_json_wrote() -> None:
    value = {"a": [1, "two", None, True, {"é": 3.25}]}
    assert parse_json(canonical_json(value)) == value


def test_text_digest_is_the_digest_of_the_value_the_text_holds_however_it_is_written() -> None:
    value = {"b": [1, 2.5, "\u00e9"], "a": {"z": None, "y": True}}
    canonical = canonical_json(value)
    want = digest(value)
    assert text_digest(canonical, want) == want  # its own hash: taken as it is
    spaced = '{ "a": {"y": true, "z": null},\n "b": [1, 2.5, "\\u00e9"] }'
    assert text_digest(spaced, want) == want  # another spelling: parsed and encoded
    # Stated as the text's own hash: the text is the one hashed, unchanged since.
    assert text_digest(spaced, sha256_hex(spaced)) == sha256_hex(spaced)
    assert text_digest(canonical.replace("2.5", "3.5"), want) != want  # an edit shows
    assert text_digest("{not json", want) is None
    with pytest.raises(UsageError, match="lone surrogate"):  # as digest refuses it
        text_digest('{"a":"\ud800"}', want)
