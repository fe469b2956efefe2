"""Errors raised while reading manifests or merging their entries."""

from __future__ import annotations

from strata.errors import CorruptMetadataError, StrataError


class ManifestCorruptedError(CorruptMetadataError):
    """A manifest, manifest list or index manifest is truncated, garbled or not Paimon's format.

    The message names the file (when the caller gave it), the block/record and what failed.
    """


class UnsupportedManifestVersionError(ManifestCorruptedError):
    """The ``_VERSION`` field holds a format identifier this reader does not understand."""


class ManifestMergeError(StrataError, ValueError):
    """Manifest entries contradict each other (a file added twice, or deleted but never added)."""
