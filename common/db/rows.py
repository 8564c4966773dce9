"""A row type for query results whose columns the caller reads by name."""

from __future__ import annotations

from typing import Any, TypeAlias

from sqlalchemy.engine import Row

AnyRow: TypeAlias = Row[*tuple[Any, ...]]
