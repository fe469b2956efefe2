"""The table API: writes, commits, scans and reads of one Paimon table."""
