"""A table's paths live in ``strata.io.paths``; this path stays importable."""

from strata.io.paths import (  # noqa: F401
    DEFAULT_PARTITION_NAME,
    PathFactory,
    _java_float,
    escape_path_name,
    partition_path,
    partition_value_string,
)
