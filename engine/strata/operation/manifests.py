"""The manifest store lives in ``strata.manifest.manifest_store``; this path stays importable."""

from strata.manifest.manifest_store import DECODED_MANIFESTS, ManifestStore, partition_types  # noqa: F401
