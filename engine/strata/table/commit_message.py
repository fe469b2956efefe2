"""CommitMessage lives in ``strata.manifest.commit_message``; this path stays importable."""

from strata.manifest.commit_message import CommitMessage  # noqa: F401
