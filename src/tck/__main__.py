"""``python -m tck`` is the ``tck`` command."""

import sys

from tck.conformance.cli import main

sys.exit(main())
