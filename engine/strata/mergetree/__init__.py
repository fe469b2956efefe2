"""The LSM tree of a primary-key bucket: write buffer, sorted runs, merge functions, merging readers."""
