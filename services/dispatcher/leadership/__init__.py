"""Leading: the dispatcher lease, kept while the leader's loops make progress."""
