"""Paimon types, table schemas and their evolution (schema/schema-N files)."""
