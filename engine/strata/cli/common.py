"""What every command of the ``strata`` command line shares: its usage error and exit status."""

from __future__ import annotations

EXIT_ERROR = 2


class CliError(ValueError):
    """A usage problem found after argument parsing (bad schema spec, bad --where...)."""
