"""Errors Strata raises; each message names the table, column, file or option at fault."""

from __future__ import annotations


class StrataError(Exception):
    """Base of every Strata error."""


class OptionError(StrataError, ValueError):
    """An unknown option, or an option with an invalid value."""


class SchemaMismatchError(StrataError, ValueError):
    """Data written does not match the table schema (missing column, wrong type, null key...)."""


class TableNotFoundError(StrataError, KeyError):
    pass


class TableAlreadyExistsError(StrataError):
    pass


class DatabaseNotFoundError(StrataError, KeyError):
    pass


class DatabaseNotEmptyError(StrataError):
    pass


class CommitConflictError(StrataError):
    """The commit conflicts with a concurrent one and must not be retried as is."""


class CommitFailedError(StrataError):
    """The commit could not be published (retries exhausted); nothing became visible."""


class WriterClosedError(StrataError):
    pass


class CorruptMetadataError(StrataError):
    """A snapshot, schema or manifest file is truncated or unreadable."""


class CorruptDataError(StrataError):
    """A data file is truncated or unreadable."""


class SnapshotNotFoundError(StrataError, KeyError):
    pass
