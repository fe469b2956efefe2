"""Paimon binary formats: BinaryRow encoding and fixed-bucket hashing."""
