"""Text and JSON as Kairos stores them: sizes in bytes of UTF-8, nesting, lone surrogates.

The text columns are MEDIUMTEXT (16 MiB of UTF-8); what a worker writes into them (a
result, a message) is clipped to ``MAX_STORED_TEXT_BYTES``. A JSON document Kairos
stores as JSON is nested at most ``MAX_JSON_DEPTH`` levels and holds only finite
numbers and valid Unicode, so every reader (pydantic's JSON reader stops near 200
levels, a JSON response refuses NaN, UTF-8 cannot carry a lone surrogate) reads it back.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from types import MappingProxyType
from typing import Any

MAX_STORED_TEXT_BYTES = 64 * 1024
"""Bytes of UTF-8 a result or a message keeps; longer ones are clipped."""

MAX_JSON_DEPTH = 100
"""Levels of nested arrays and objects a stored JSON document may have."""

CLIPPED = "..."

# A JSON string (skipped whole), a bracket or a comma: the structure of a document,
# found without parsing it.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRUCTURE = re.compile(_STRING + r"|[\[\]{},]", re.DOTALL)
_STRINGS = re.compile(_STRING, re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_MEMBER_KEY = re.compile(r"\s*(" + _STRING + r")\s*:", re.DOTALL)
_CLOSING = MappingProxyType({"[": "]", "{": "}"})


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (UTF-8 cannot carry one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8, a lone surrogate counted as U+FFFD."""
    return len(scrub(text).encode("utf-8"))


def clip_utf8(text: str, limit: int = MAX_STORED_TEXT_BYTES) -> str:
    """``text`` scrubbed and cut to at most ``limit`` bytes of UTF-8, ending in "..." when
    cut; a character is never split, so the result is always valid UTF-8."""
    data = scrub(text).encode("utf-8")
    if len(data) <= limit:
        return data.decode("utf-8")
    # Cutting bytes can split the last character; "ignore" drops that partial tail.
    return data[: max(0, limit - len(CLIPPED))].decode("utf-8", "ignore") + CLIPPED


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest (0 for a scalar).

    Counted without parsing, so a document far deeper than any parser's recursion limit
    costs one regular-expression pass instead of a ``RecursionError``.
    """
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def nested_deeper_than(text: str, depth: int) -> bool:
    """True when the arrays and objects of a JSON text nest more than ``depth`` levels;
    cheap for a text with few brackets, which cannot nest deeper than it has."""
    return text.count("[") + text.count("{") > depth and json_depth(text) > depth


def json_elements(text: str) -> list[str] | None:
    """The raw text of each element of a JSON array, or None when ``text`` is not one.

    Like ``json_depth``, it counts brackets instead of parsing: an element nested deeper
    than a parser goes is still split off, to be read (or refused) on its own.
    """
    parts = _top_level_parts(text, "[")
    return None if parts is None else [part.strip() for part in parts]


def json_members(text: str) -> dict[str, str] | None:
    """The raw text of each member value of a JSON object by key, or None when ``text`` is
    not one (see ``json_elements``)."""
    parts = _top_level_parts(text, "{")
    if parts is None:
        return None
    members: dict[str, str] = {}
    for part in parts:
        key = _MEMBER_KEY.match(part)
        if key is None:
            return None
        try:
            name = json.loads(key.group(1))
        except ValueError:
            return None
        members[name] = part[key.end() :].strip()
    return members


def _top_level_parts(text: str, opening: str) -> list[str] | None:
    """The comma-separated parts directly inside ``text``'s outer brackets."""
    start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    if end - start < 2 or text[start] != opening or text[end - 1] != _CLOSING[opening]:
        return None
    parts: list[str] = []
    depth, begin = 0, start + 1
    for match in _STRUCTURE.finditer(text, start + 1, end - 1):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
        elif token in ("]", "}"):
            depth -= 1
            if depth < 0:
                return None
        elif token == "," and depth == 0:
            parts.append(text[begin : match.start()])
            begin = match.end()
    last = text[begin : end - 1]
    if depth != 0 or (parts and not last.strip()):
        return None
    return [*parts, last] if last.strip() else parts


def read_stored_json(text: str) -> Any:
    """Parse a stored JSON document that every reader can read back.

    Raises ``ValueError`` when it is not JSON, is nested deeper than ``MAX_JSON_DEPTH``,
    holds a number JSON responses cannot carry (NaN, infinities) or a lone surrogate.
    """
    if nested_deeper_than(text, MAX_JSON_DEPTH):
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as e:  # text that is not JSON can hide brackets from the count
        raise ValueError("nested too deep to parse") from e
    if _SURROGATE_ESCAPE.search(text) is not None or scrub(text) != text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("holds a lone surrogate") from e
    return value


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value
