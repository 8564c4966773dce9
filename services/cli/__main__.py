"""``python -m services.cli``: the ``kairos`` command."""

import sys

from services.cli.main import main

sys.exit(main())
