"""Compaction of primary-key buckets (universal strategy) and of append tables."""
