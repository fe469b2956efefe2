"""A new table's schema is built and validated by ``strata.schema.definition``; this path stays importable."""

from strata.schema.definition import build_schema, validate_schema  # noqa: F401
