"""File-store operations: manifests, the commit protocol, conflict detection, expiry."""
