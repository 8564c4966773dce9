"""What operators do, shared by the console and the ``kairos`` command: jobs (``jobs``),
callbacks (``callbacks``), apps' keys and grants (``app_access``), and the rest of the
operator commands (``commands``: apps, operators, dead letters, stuck executions)."""
