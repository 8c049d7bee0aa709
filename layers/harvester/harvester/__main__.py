"""``python -m harvester`` is the `harvest` command."""

import sys

from harvester.cli import main

sys.exit(main())
