"""Test harnesses that ship with Strata, so that users and CI can run them against a build:
``strata.testing.simulation`` drives random tables, operations and readers against a model."""
