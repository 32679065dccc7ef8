"""``python -m jobs.dr``: see ``jobs.dr.cli``."""

from __future__ import annotations

import sys

from jobs.dr.cli import main

if __name__ == "__main__":
    sys.exit(main())
