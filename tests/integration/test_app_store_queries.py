"""The app store on its hot paths costs what the SQL it replaced did: one statement for
the API's key lookup on a cache miss, two for the notifier's sending terms of an app,
one for the dispatcher's policies in the claim's transaction."""

from __future__ import annotations

import redis
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import ApiSettings, StoreSettings
from common.db.apps import MySqlAppStore, MySqlAppTransactions
from common.keys import RedisKeys
from services.api.state import ApiState
from tests.integration.helpers import make_app


def test_a_key_lookup_reads_once_and_the_sending_terms_twice(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis, statements: list[str]
) -> None:
    credentials = make_app(engine)
    settings = ApiSettings(namespace=namespace.namespace)
    clock = ClusterClock(redis_client)
    state = ApiState(settings, engine, redis_client, clock, RedisKeys(namespace.namespace))
    statements.clear()
    app = state.app_for_key(credentials.api_key)
    assert app is not None and app.app_id == credentials.app_id
    assert len(statements) == 1
    assert statements[0].startswith("SELECT apps.id, apps.app_id, apps.name")
    assert "FROM api_keys INNER JOIN apps" in statements[0]

    statements.clear()
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.signing_secrets(app.id, 0) == [credentials.signing_secret]
        assert apps.callback_networks(app.id) is None
    assert len(statements) == 2

    statements.clear()
    with engine.begin() as conn:
        assert app.id in MySqlAppStore(conn).app_policies()
    assert len(statements) == 1
    assert statements[0].startswith("SELECT apps.id, apps.app_id, apps.weight")
