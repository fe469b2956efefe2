"""FileIO: one abstraction over the local filesystem and S3-compatible object stores."""

from strata.fs.file_io import FileIO, FileStatus, LocalFileIO, file_io_for

__all__ = ["FileIO", "FileStatus", "LocalFileIO", "file_io_for"]
