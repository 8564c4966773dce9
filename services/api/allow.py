"""Which methods a path takes, across every router: a 405's ``Allow`` header.

A job is read by one router and changed by another; Starlette's 405 names only the
methods of the first route whose path matched, so ``Allow`` lied.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter
from starlette.routing import Route


class AllowedMethods:
    """The routes of the API's routers, to ask which methods a path takes."""

    def __init__(self, routers: Iterable[APIRouter]) -> None:
        self._routes = [r for router in routers for r in router.routes if isinstance(r, Route)]

    def at(self, path: str) -> list[str]:
        """Every method some route takes at ``path``, sorted."""
        methods: set[str] = set()
        for route in self._routes:
            if route.methods and route.path_regex.match(path):
                methods |= route.methods
        return sorted(methods)
