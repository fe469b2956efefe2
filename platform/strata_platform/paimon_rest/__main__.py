"""``python -m strata_platform.paimon_rest``: serve Paimon's REST catalog API over a Strata warehouse."""

from strata_platform.paimon_rest.server import main

raise SystemExit(main())
