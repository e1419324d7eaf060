"""An adapter module that calls sys.exit(0) while it is imported (tests/cli/test_reliability.py)."""

import sys

sys.exit(0)
