"""Scan planning: snapshot selection, manifest reading, pruning by partition, bucket and stats."""
