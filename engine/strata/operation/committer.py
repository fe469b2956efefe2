"""Committer: how an operation that writes publishes its messages.

Operations take the store, not the table; the table hands them its ``new_commit``, so what they
write is committed as the table's own commits are (``strata.table.commit.TableCommit``, with
the table's commit callbacks), without the operation importing the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from strata.manifest.commit_message import CommitMessage
from strata.operation.commit import CommitResult


class Committer(Protocol):
    def commit(self, messages: Sequence[CommitMessage], identifier: int = ...) -> CommitResult: ...


# a committer for a commit user (None: a new, random one)
NewCommit = Callable[[str | None], Committer]
