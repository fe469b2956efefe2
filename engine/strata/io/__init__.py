"""Data files: writing sorted runs and append files to Parquet with Paimon's stats, and reading them."""
