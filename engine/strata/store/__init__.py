"""The store layer: one table's files and metadata (``FileStore``), below the ``Table`` facade."""

from strata.store.file_store import FileStore, HasStore, PublishFn, store_of
from strata.store.identifier import Identifier

__all__ = ["FileStore", "HasStore", "Identifier", "PublishFn", "store_of"]
