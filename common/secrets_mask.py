"""Keeping credentials out of what Kairos logs and raises."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# user:password@ in any URL-like text (the password part, up to the @).
_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")


def masked_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_text(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:{MASK}@{parts.hostname or ''}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def mask_text(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with the password replaced."""
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
