"""FileIO: one abstraction over the local filesystem and S3-compatible object stores."""

from __future__ import annotations

from collections.abc import Mapping

from strata.fs.file_io import FileIO, FileStatus, LocalFileIO

__all__ = ["FileIO", "FileStatus", "LocalFileIO", "file_io_for"]


def file_io_for(warehouse: str, options: Mapping[str, str] | None = None) -> FileIO:
    """The FileIO for a warehouse URI: local paths and file:// now; s3:// via strata.fs.s3."""
    if warehouse.startswith(("s3://", "s3a://")):
        from strata.fs.s3 import S3FileIO  # optional extra

        return S3FileIO(dict(options or {}))
    return LocalFileIO()
