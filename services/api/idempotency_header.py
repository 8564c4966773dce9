"""The ``Idempotency-Key`` request header (IETF httpapi idempotency-key draft): its
structured-field form (a quoted sf-string, ``"report-1"``) and the plain form
(``report-1``) name the same key.
"""

from __future__ import annotations

from common.errors import ValidationFailedError

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

MAX_KEY_CHARS = 128
# The quoted form of the longest key: every character escaped, and the two quotes.
MAX_HEADER_CHARS = 2 * MAX_KEY_CHARS + 2


def _refuse(why: str) -> ValidationFailedError:
    return ValidationFailedError(
        HEADER,
        f"{why}; send 1 to {MAX_KEY_CHARS} printable ASCII characters, plain (report-1) "
        'or as a structured-field string ("report-1")',
    )


def _unquote(value: str) -> str:
    """The text of an sf-string (RFC 8941 3.3.3); parameters after it are ignored."""
    key: list[str] = []
    index = 1
    while index < len(value):
        char = value[index]
        if char == '"':
            rest = value[index + 1 :].strip()
            if rest and not rest.startswith(";"):
                raise _refuse("text follows the closing quote")
            return "".join(key)
        if char == "\\":
            index += 1
            if index >= len(value) or value[index] not in '"\\':
                raise _refuse('only \\" and \\\\ may be escaped in a quoted key')
            char = value[index]
        key.append(char)
        index += 1
    raise _refuse("the quoted key has no closing quote")


def parse_key(value: str | None) -> str | None:
    """The key a header value names, None without the header; a 422 naming
    ``Idempotency-Key`` for an empty, too long or malformed one."""
    if value is None:
        return None
    text = value.strip(" \t")
    key = _unquote(text) if text.startswith('"') else text
    if not key:
        raise _refuse("the key is empty")
    if len(key) > MAX_KEY_CHARS:
        raise _refuse(f"the key has {len(key)} characters")
    if any(not " " <= char <= "~" for char in key):
        raise _refuse("the key holds a character other than printable ASCII")
    return key
