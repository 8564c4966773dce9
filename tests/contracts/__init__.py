"""Contracts: one test class per port, run against the real store (tests/integration)
and its in-memory twin (tests/unit), so the fake the unit tests trust behaves as the real
one does."""
