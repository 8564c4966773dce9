"""Text as Kairos stores it: clipped by bytes of UTF-8, JSON that every reader reads back."""

from __future__ import annotations

import json

import pytest

from common.jsontext import (
    MAX_JSON_DEPTH,
    MAX_STORED_TEXT_BYTES,
    clip_utf8,
    json_depth,
    json_elements,
    json_members,
    read_stored_json,
    scrub,
    utf8_size,
)


@pytest.mark.parametrize("char", ["x", "é", "€", "😀"])
def test_clipping_counts_bytes_and_never_splits_a_character(char: str) -> None:
    clipped = clip_utf8(char * (MAX_STORED_TEXT_BYTES + 1))
    data = clipped.encode("utf-8")  # raises if a character was split
    assert len(data) <= MAX_STORED_TEXT_BYTES
    assert len(data) > MAX_STORED_TEXT_BYTES - 8
    assert clipped.endswith("...")
    assert set(clipped[:-3]) == {char}


def test_text_within_the_limit_is_kept_whole() -> None:
    exact = "€" * (MAX_STORED_TEXT_BYTES // 3) + "x"
    assert utf8_size(exact) == MAX_STORED_TEXT_BYTES
    assert clip_utf8(exact) == exact
    assert clip_utf8("") == ""


def test_lone_surrogates_become_replacement_characters() -> None:
    assert scrub("a\ud800b\udc00c") == "a\ufffdb\ufffdc"
    assert scrub("ok 😀") == "ok 😀"
    clip_utf8("\ud800" * 10, limit=8).encode("utf-8")
    assert utf8_size("\ud800") == 3


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_is_counted_without_parsing_and_ignores_brackets_in_strings() -> None:
    assert json_depth('{"a": [1, {"b": "[[[{{{"}], "c": "\\"]"}') == 3
    assert json_depth("42") == 0
    assert json_depth(nested(100_000)) == 100_000


def test_stored_json_within_the_limits_reads_back() -> None:
    value = {"€": [1, 2.5, None, True, "😀"], "n": 10**30}
    assert read_stored_json(json.dumps(value, ensure_ascii=False)) == value
    assert read_stored_json(json.dumps(value)) == value
    assert read_stored_json(nested(MAX_JSON_DEPTH)) is not None


@pytest.mark.parametrize(
    "text",
    [
        nested(MAX_JSON_DEPTH + 1),
        nested(100_000),
        '{"a": "\\ud800"}',
        '["\\udc00x"]',
        '{"\\ud800": 1}',
        "[NaN]",
        "[Infinity]",
        "[1e400]",
        "not json",
        '{"a": ',
    ],
)
def test_stored_json_no_reader_can_take_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        read_stored_json(text)


def test_an_array_splits_into_its_elements_however_deep_they_nest() -> None:
    deep = nested(100_000)
    text = f' [1, "a,]", {{"b": [2, 3]}}, {deep} ] '
    assert json_elements(text) == ["1", '"a,]"', '{"b": [2, 3]}', deep]
    assert json_elements("[]") == []


def test_an_object_splits_into_its_members_by_key() -> None:
    text = '{"id": "e-1", "params": {"a": [1, 2]}, "n\\u00e9": 3, "s": "x:y,z"}'
    assert json_members(text) == {
        "id": '"e-1"',
        "params": '{"a": [1, 2]}',
        "né": "3",
        "s": '"x:y,z"',
    }
    assert json_members("{}") == {}


@pytest.mark.parametrize(
    "text", ["", "[1, 2", "[1, 2,]", "[1]]", "{1: 2}", '{"a" 1}', '{"\\x": 1}', "42", '"[1]"']
)
def test_text_that_is_not_one_array_or_object_does_not_split(text: str) -> None:
    assert json_elements(text) is None
    assert json_members(text) is None
