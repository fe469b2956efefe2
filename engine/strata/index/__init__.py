"""Dynamic-bucket key placement: HASH index files and the bucket assigner (bucket = -1)."""

from strata.index.bucket_assigner import DynamicBucketAssigner, PartitionIndex
from strata.index.hash_index import read_hashes, write_hash_index

__all__ = ["DynamicBucketAssigner", "PartitionIndex", "read_hashes", "write_hash_index"]
