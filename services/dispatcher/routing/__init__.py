"""Routing: the live workers and their room (``workers``), choosing one for each
execution (``route``), and sending executions to it (``dispatch``), for the trigger
and upkeep stages alike."""
