"""``kairos``: the command line of every service and operator command (``main``), one
module per group of commands."""

from services.cli.main import STORE_DOWN_EXIT, build_parser, main

__all__ = ["STORE_DOWN_EXIT", "build_parser", "main"]
