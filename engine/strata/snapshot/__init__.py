"""Snapshots (snapshot/snapshot-N JSON) and the hints that find the latest and earliest."""
