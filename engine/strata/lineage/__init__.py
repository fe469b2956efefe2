"""Pipeline lineage and consistent multi-table reads (the MetaService of FLIP-276).

* ``lineage_properties`` - what a pipeline stage passes as the ``properties`` of its commit: its
  job name, the upstream snapshots and external offsets it consumed (``strata.lineage.record``);
* ``consistent_set`` / ``read_consistent`` / ``tag_consistent_set`` - the newest snapshots of
  several tables that derive from one root point, read together or tagged for other readers
  (``strata.lineage.consistent``);
* ``lineage_graph`` - jobs, tables and how far each table is behind its upstream
  (``strata.lineage.graph``).
"""

from strata.lineage.consistent import ConsistentSet, consistent_set, read_consistent, tag_consistent_set
from strata.lineage.graph import LineageEdge, LineageGraph, lineage_graph
from strata.lineage.record import SnapshotLineage, effective_lineage, lineage_properties, parse_lineage

__all__ = [
    "ConsistentSet", "LineageEdge", "LineageGraph", "SnapshotLineage", "consistent_set", "effective_lineage",
    "lineage_graph", "lineage_properties", "parse_lineage", "read_consistent", "tag_consistent_set",
]
