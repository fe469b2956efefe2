"""Deterministic simulation of the table store: random tables, operations, committers and faults, checked against a model."""
