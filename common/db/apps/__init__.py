"""The apps aggregate: each app's ``apps`` row and its ``api_keys`` rows, read and
written through ``AppStore`` alone.

What belongs to it: the app (public id, name, creation, disabled or not), its API keys
(stored as hashes) and signing secrets (current, and the previous one while a rotation
overlaps), what an operator grants it (handler patterns, callback networks) and its
limits (weight, cap, job and run-log quotas), which the dispatcher reads as its policy.
It also reads, never writes, what other tables hold of an app: its live jobs by handler
and their count (for grants and quotas), its runs waiting and going and their start lag
(its standing in the fair share); and it writes the audit row of a change to an app in
the change's own transaction (``common.db.audit``). Jobs themselves are not part of it.

``MySqlAppStore`` (``mysql.py``) holds the SQL, on a connection whose transaction its
caller holds (``sql_keys.py``, ``sql_grants.py``, ``sql_reads.py``);
``MySqlAppTransactions`` hands one out per connection of an engine. Their in-memory twin
is ``common.memory.apps.AppTables`` (part of ``MemoryStore``);
``tests/contracts/app_store.py`` holds both to one contract. Who uses it: the API's
authentication and job quotas, the console's apps pages and overview, the ``kairos app``
commands, the dispatcher's claim and firing (policies) and gauges (standing), the
notifier (signing secrets and networks) and workers (run-log quotas).
"""

from common.db.apps.mysql import MySqlAppStore, MySqlAppTransactions
from common.db.apps.records import (
    DEFAULT_POLICY,
    LAG_WINDOW_MS,
    QUANTILES,
    ApiKeyRecord,
    App,
    AppActivity,
    AppCredentials,
    AppPolicy,
    AppRecord,
    NewApiKey,
    hash_api_key,
)
from common.db.apps.store import AppStore, AppTransactions

__all__ = [
    "DEFAULT_POLICY",
    "LAG_WINDOW_MS",
    "QUANTILES",
    "ApiKeyRecord",
    "App",
    "AppActivity",
    "AppCredentials",
    "AppPolicy",
    "AppRecord",
    "AppStore",
    "AppTransactions",
    "MySqlAppStore",
    "MySqlAppTransactions",
    "NewApiKey",
    "hash_api_key",
]
