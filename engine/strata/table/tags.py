"""Tags live in ``strata.snapshot.tags`` (beside the snapshot and branch managers); this path stays importable."""

from strata.snapshot.tags import (  # noqa: F401
    TAG_PREFIX,
    TagInfo,
    TagManager,
    check_tag_name,
    duration_from_json,
    local_datetime_from_json,
    local_datetime_to_json,
    trim_to_snapshot,
)
