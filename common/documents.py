"""Free-form JSON documents a job carries (params): the text Kairos stores for one, and
what a document must be so that every stage can read that text back.

A document is refused when it nests deeper than ``MAX_DEPTH`` (readers with a recursion
limit, and a whole dispatch pack, failed on one nested a few hundred deep), when its text
holds a lone surrogate (no UTF-8 encoding exists for it, so every read of the job
failed), or when it holds NaN or Infinity (not JSON: they came back as null).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object, as ``json.loads`` reads one or ``json.dumps`` writes one: what its
members hold is known only when it is read."""

JsonValue: TypeAlias = Any
"""Any JSON value (an object, array, text, number, true, false or null), as
``json.loads`` reads one: its shape is its writer's, known only when it is read."""

MAX_DEPTH = 32
"""Objects and arrays inside one another, the document itself counting as one."""


def stored_text(document: JsonValue) -> str:
    """The JSON text Kairos stores for ``document``: compact, non-ASCII escaped.

    Size limits are measured on this text, in UTF-8 bytes. Raises ValueError for NaN
    or Infinity.
    """
    return json.dumps(document, separators=(",", ":"), allow_nan=False)


def stored_size(document: JsonValue) -> int:
    """The size in UTF-8 bytes of the text ``stored_text`` gives for ``document``."""
    return len(stored_text(document).encode())


def _shown(path: str) -> str:
    """A path as messages show it: clipped, so a long key cannot flood an answer."""
    return path if len(path) <= 200 else path[:197] + "..."


def _member(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def _text_problem(text: str, where: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as e:
        return (
            f"{_shown(where)} holds a lone surrogate ({text[e.start]!r}), which no UTF-8 "
            "text can carry: send each character whole (a surrogate pair, or the character)"
        )
    return None


def _scalar_problem(value: Any, where: str) -> str | None:
    if isinstance(value, str):
        return _text_problem(value, where)
    if isinstance(value, float) and not math.isfinite(value):
        return (
            f"{_shown(where)} is NaN or Infinity, which JSON does not allow: send null or a string"
        )
    return None


def _members(value: dict[str, Any] | list[Any]) -> Iterable[tuple[str | int, Any]]:
    return value.items() if isinstance(value, dict) else enumerate(value)


def document_problem(document: Any, name: str, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``document`` (called ``name`` in messages) cannot be stored, or None.

    Walks the document without recursion, so any depth the JSON reader let through is
    measured rather than overflowing the stack. Paths are built for objects and arrays
    only, and for the one member a message names.
    """
    if not isinstance(document, dict | list):
        return _scalar_problem(document, name)
    stack: list[tuple[dict[str, Any] | list[Any], str, int]] = [(document, name, 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > max_depth:
            return (
                f"{_shown(path)} is nested {depth} levels deep; objects and arrays may nest "
                f"at most {max_depth} levels: flatten the document"
            )
        for key, child in _members(value):
            if isinstance(key, str) and (problem := _text_problem(key, f"a key of {path}")):
                return problem
            if isinstance(child, dict | list):
                stack.append((child, _member(path, key), depth + 1))
            elif isinstance(child, str | float) and (
                problem := _scalar_problem(child, _member(path, key))
            ):
                return problem
    return None
