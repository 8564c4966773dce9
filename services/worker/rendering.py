"""What a run leaves behind as text: its result and its message, in a form every reader
of the stored execution reads back (see ``common.jsontext``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from common.jsontext import (
    MAX_JSON_DEPTH,
    MAX_STORED_TEXT_BYTES,
    clip_utf8,
    nested_deeper_than,
    scrub,
    utf8_size,
)


@dataclass(frozen=True)
class Rendered:
    """A return value as stored: ``result`` is JSON; ``note`` says how it was changed."""

    result: str | None
    note: str | None = None


def render_result(value: object) -> Rendered:
    """A handler's return value as the execution's ``result``.

    JSON when it can be: objects JSON has no type for are written as their ``str``, and
    lone surrogates become U+FFFD. A value that is not JSON (a cycle, NaN, keys that are
    not strings), nested deeper than ``MAX_JSON_DEPTH`` or larger than
    ``MAX_STORED_TEXT_BYTES`` is stored as a JSON string of its text, clipped, and the
    note says why: the run succeeded, and a retry would do its work again.
    """
    if value is None:
        return Rendered(None)
    try:
        text = json.dumps(value, default=str, ensure_ascii=False, allow_nan=False)
    except Exception as e:  # TypeError, ValueError, RecursionError, or a __str__ raising
        return _as_text(_safe_repr(value), f"it is not JSON ({describe_error(e)})")
    scrubbed = scrub(text)
    if utf8_size(scrubbed) > MAX_STORED_TEXT_BYTES:
        return _as_text(scrubbed, f"it is larger than {MAX_STORED_TEXT_BYTES // 1024} KiB")
    if nested_deeper_than(scrubbed, MAX_JSON_DEPTH):
        return _as_text(scrubbed, f"it is nested deeper than {MAX_JSON_DEPTH} levels")
    if scrubbed != text:
        return Rendered(scrubbed, "lone surrogates in the result were replaced by U+FFFD")
    return Rendered(text)


def describe_error(error: BaseException) -> str:
    """``Type: text`` of an exception, clipped, even one whose ``__str__`` raises."""
    try:
        text = str(error)
    except Exception:
        text = "(its text cannot be read: __str__ raised)"
    return clip_utf8(f"{type(error).__name__}: {text}")


def _as_text(text: str, why: str) -> Rendered:
    return Rendered(_json_string(text), f"the result is stored as text: {why}")


def _json_string(text: str) -> str:
    """``text`` as a JSON string of at most ``MAX_STORED_TEXT_BYTES``, clipped to fit."""
    clipped = clip_utf8(text, MAX_STORED_TEXT_BYTES - 2)
    while True:
        encoded = json.dumps(clipped, ensure_ascii=False)
        excess = utf8_size(encoded) - MAX_STORED_TEXT_BYTES
        if excess <= 0:
            return encoded
        # Escapes make the JSON longer than the text: cut at least the excess again.
        clipped = clip_utf8(clipped, utf8_size(clipped) - excess - 3)


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a cycle past recursion, or a __repr__ that raises
        return f"<{type(value).__qualname__} object; its repr raised>"
