"""Predicates (``strata.expressions``), bound to a table schema by ``bind``
(``strata.expressions.literals``) and evaluated on rows and statistics
(``strata.expressions.evaluators``); this path stays importable."""

from strata.expressions import (  # noqa: F401
    COMPARISONS,
    And,
    BoundLeaf,
    Column,
    ColumnStats,
    InRows,
    Leaf,
    Not,
    Or,
    Predicate,
    StatsLookup,
    col,
    equality_literals,
    in_rows,
    only_fields,
)
from strata.expressions.literals import bind  # noqa: F401
