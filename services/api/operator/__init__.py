"""What operators do, shared by the console and the ``kairos`` command: jobs
(``jobs``), callbacks (``callbacks``), apps' keys and grants (``app_access``), the
other operator commands (``commands``: apps, operators, dead letters, stuck
executions), and what those read or change underneath (``dead_letters``,
``execution_control``, ``worker_control``, ``queue_order``, ``cluster_stats``)."""
