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
from typing import Any

MAX_STORED_TEXT_BYTES = 64 * 1024
"""Bytes of UTF-8 a result or a message keeps; longer ones are clipped."""

MAX_JSON_DEPTH = 100
"""Levels of nested arrays and objects a stored JSON document may have."""

CLIPPED = "..."

# A JSON string (skipped whole) or one bracket: what the depth of a document is made of.
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


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
    depth = deepest = 0
    for match in _NESTING.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def read_stored_json(text: str) -> Any:
    """Parse a stored JSON document that every reader can read back.

    Raises ``ValueError`` when it is not JSON, is nested deeper than ``MAX_JSON_DEPTH``,
    holds a number JSON responses cannot carry (NaN, infinities) or a lone surrogate.
    """
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as e:  # text that is not JSON can hide brackets from the count
        raise ValueError("nested too deep to parse") from e
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
