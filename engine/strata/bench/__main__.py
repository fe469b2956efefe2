"""``python -m strata.bench``: see strata.bench."""

import sys

from strata.bench import main

sys.exit(main())
