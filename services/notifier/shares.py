"""Sharing the notifier's attempts between apps, so one app's receivers never take them all.

A receiver that hangs holds an attempt for the whole request timeout. Without a share,
an app whose receiver hangs, with enough callbacks queued, would hold every attempt the
notifier runs at once, and every other app's callbacks would wait behind it.
"""

from __future__ import annotations

import threading


class AppShares:
    """Attempts in flight, per app, out of ``slots`` (the notifier's concurrency).

    An app may have ``share`` attempts in flight at once, and more only while ``share``
    slots stay free for the others: an app alone may use most of the notifier, and one
    whose receivers hang holds at most ``slots - share`` attempts.
    """

    def __init__(self, slots: int, share: int) -> None:
        self._slots = slots
        self._share = max(1, share)
        self._by_app: dict[int, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def take(self, app_id: int) -> bool:
        """Count one more attempt of the app; False if it must wait for its turn."""
        with self._lock:
            held = self._by_app.get(app_id, 0)
            if held >= self._share and self._slots - (self._total + 1) < self._share:
                return False
            self._by_app[app_id] = held + 1
            self._total += 1
            return True

    def give_back(self, app_id: int) -> None:
        """The app's attempt ended."""
        with self._lock:
            held = self._by_app.get(app_id, 0) - 1
            if held > 0:
                self._by_app[app_id] = held
            else:
                self._by_app.pop(app_id, None)
            self._total -= 1


def default_share(slots: int) -> int:
    """An app's share of ``slots`` attempts when no setting gives one: a quarter."""
    return max(1, slots // 4)
