"""A row type for query results whose columns the caller reads by name."""

from __future__ import annotations

from typing import Any, TypeAlias

# A SQLAlchemy ``Row`` or a ``common.db.driver.fetch`` named tuple: both read columns by
# name (as attributes) and unpack by position; the columns' types are the caller's to know.
AnyRow: TypeAlias = Any
