"""Kairos's stores in memory, for unit tests: the twins of MySQL (``store.MemoryStore``),
RabbitMQ (``broker.MemoryBroker``), the worker directory (``live_workers.MemoryWorkers``)
and the started marks in Redis (``started_marks.MemoryStartedMarks``).

Each keeps the contract its real twin keeps (tests/contracts, run on both tiers), so
the logic above them is tested without servers, as procrastinate's InMemoryConnector
and dramatiq's StubBroker serve their users.
"""
