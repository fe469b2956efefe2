"""Errors Strata raises; each message names the table, column, file or option at fault."""

from __future__ import annotations


class StrataError(Exception):
    """Base of every Strata error."""


class OptionError(StrataError, ValueError):
    """An unknown option, or an option with an invalid value."""


class SchemaMismatchError(StrataError, ValueError):
    """Data written does not match the table schema (missing column, wrong type, null key...)."""


class _NotFoundError(StrataError, KeyError):
    """A KeyError (callers may catch it as one) that prints its message as written: KeyError's
    own str() is the repr of its argument, quotes and escapes included."""

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class TableNotFoundError(_NotFoundError):
    pass


class TableAlreadyExistsError(StrataError):
    pass


class DatabaseNotFoundError(_NotFoundError):
    pass


class DatabaseNotEmptyError(StrataError):
    pass


class CommitConflictError(StrataError):
    """The commit conflicts with a concurrent one and must not be retried as is."""


class CommitFailedError(StrataError):
    """The commit could not be published (retries exhausted) and surely nothing was: a commit
    that may still land (an ambiguous write) raises CommitStateUnknownError instead."""


class CommitStateUnknownError(StrataError):
    """A write whose outcome cannot be known (a lost reply, a timeout, and the read-back failed
    too): it may or may not have been published. Every file it wrote is kept; read the table
    again to learn the outcome (a replay with the same commit user and identifier is skipped if
    it landed), and let orphan-file cleanup remove the files if it did not (Iceberg's
    CommitStateUnknownException)."""


class InvalidNameError(StrataError, ValueError):
    """A database, table, branch or tag name that breaks a naming rule (the message names it)."""


class WriterClosedError(StrataError):
    pass


class CorruptMetadataError(StrataError):
    """A snapshot, schema or manifest file is truncated or unreadable."""


class CorruptDataError(StrataError):
    """A data file is truncated or unreadable."""


class SnapshotNotFoundError(_NotFoundError):
    pass


class FilterError(StrataError, ValueError):
    """A filter that cannot be bound to the table: an unknown column, or a literal that does not
    convert to its column's type (the message names both, with their types)."""
