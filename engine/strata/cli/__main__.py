"""``python -m strata.cli``: the ``strata`` command."""

import sys

from strata.cli.app import main

sys.exit(main())
