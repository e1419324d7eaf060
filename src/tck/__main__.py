"""``python -m tck`` is the ``tck`` command."""

import sys

from tck.cli import main

sys.exit(main())
