"""Identifier: a table's ``database.table`` name, checked when it is made."""

from __future__ import annotations

from dataclasses import dataclass

from strata.errors import InvalidNameError
from strata.names import check_database_name, check_object_name


@dataclass(frozen=True)
class Identifier:
    """A table (``table``: ``t``, or ``t$snapshots``, ``t$branch_b1``... for its system tables and
    branches) in a database; both names are checked when it is made (``strata.names``), so no
    entry point reaches a catalog with a name that breaks a rule."""

    database: str
    table: str

    def __post_init__(self) -> None:
        check_database_name(self.database)
        check_object_name(self.table)

    @staticmethod
    def parse(name: str | Identifier) -> Identifier:
        """``'db.t'`` -> Identifier('db', 't'); a database name holds no '.', so the first one
        splits (a branch name may: ``db.t$branch_v1.0``)."""
        if isinstance(name, Identifier):
            return name
        if not isinstance(name, str):
            raise InvalidNameError(f"table name must be a string 'database.table', got {type(name).__name__}")
        database, dot, table = name.partition(".")
        if not dot:
            raise InvalidNameError(f"table name must be 'database.table', got {name!r}")
        try:
            return Identifier(database, table)
        except InvalidNameError as exc:
            raise InvalidNameError(f"{name!r} is not a valid 'database.table' name: {exc}") from None

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"
