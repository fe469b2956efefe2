"""The ``strata`` command line (``strata.cli.app.main``), a module per command group."""

from strata.cli.app import build_parser, main
from strata.cli.common import EXIT_ERROR, CliError
from strata.cli.spec import build_table_schema, parse_options, parse_schema_spec, parse_where

__all__ = ["EXIT_ERROR", "CliError", "build_parser", "build_table_schema", "main", "parse_options",
           "parse_schema_spec", "parse_where"]
