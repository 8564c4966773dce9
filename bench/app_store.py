"""App store: what handing out a store per connection costs on the apps' hot paths.

The API's key lookup on a cache miss and the notifier's read of an app's sending terms
(its signing secrets and callback networks) go through ``MySqlAppTransactions``
(``reading()``); their SQL is the store's own. This times each path through it against
the same store methods on a connection opened by hand (``engine.connect()``), in
interleaved rounds in one run, in a namespace of its own with ``--apps`` apps.

    .venv/bin/python bench/app_store.py --apps 50 --calls 2000

The last line printed is one JSON object: microseconds per call (median of the rounds)
each way, and their ratio (through the store / by hand). Rounds alternate which way
goes first. ``no_io`` is the same pair on connections that cost nothing: the store's
own cost per call.
"""

from __future__ import annotations

import sqlalchemy as sa
from store_timing import ROUNDS, compared, run

from common.db.apps import MySqlAppStore, MySqlAppTransactions
from common.handler_patterns import EVERY_HANDLER


def measure(engine: sa.Engine, apps: int, calls: int) -> dict[str, object]:
    """Interleaved rounds of each path, through the store and by hand."""
    store = MySqlAppTransactions(engine)
    with store.transaction() as s:
        made = [s.create_app(f"app-{n}", n, EVERY_HANDLER) for n in range(apps)]
    key = made[-1].api_key
    app_pk = 0
    with store.reading() as s:
        found = s.find_app_by_key(key)
        assert found is not None
        app_pk = found.id

    def auth_store(_: int) -> None:
        with store.reading() as s:
            s.find_app_by_key(key)

    def auth_by_hand(_: int) -> None:
        with engine.connect() as conn:
            MySqlAppStore(conn).find_app_by_key(key)

    def terms_store(n: int) -> None:
        with store.reading() as s:
            s.signing_secrets(app_pk, n)
            s.callback_networks(app_pk)

    def terms_by_hand(n: int) -> None:
        with engine.connect() as conn:
            s = MySqlAppStore(conn)
            s.signing_secrets(app_pk, n)
            s.callback_networks(app_pk)

    pairs = {"auth": (auth_store, auth_by_hand), "terms": (terms_store, terms_by_hand)}
    figures: dict[str, object] = {"apps": apps, "calls": calls, "rounds": ROUNDS}
    return figures | compared(pairs, calls)


if __name__ == "__main__":
    run(__doc__, "apps", measure, MySqlAppTransactions, MySqlAppStore)
