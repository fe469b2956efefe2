"""Pieces of the GROWTH cost curves: the upserts' own peak RSS (reset after the base is built) and
the re-keying of W2 upserts onto a larger base."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from strata.bench import data as gen
from strata.bench.growth import _over_base, _peak_rss_since_reset, _reset_peak_rss


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
def test_peak_rss_is_reset_after_the_base_is_built() -> None:
    block = np.ones(300 << 20, dtype=np.uint8)  # 300 MiB touched: the peak so far includes it
    before = _peak_rss_since_reset()
    del block
    peak_before_reset = _reset_peak_rss()
    after = _peak_rss_since_reset()
    assert before is not None and peak_before_reset is not None and after is not None
    assert after < before - 200  # the freed block no longer counts


def test_upserts_are_rekeyed_onto_the_base() -> None:
    chunk = gen.w2_data(1.0, 2).commits[1]  # the curve's commits are full-size at any scale
    base_rows = 5_000_000
    ids = chunk.column("id").to_numpy()
    rekeyed = _over_base(chunk, base_rows).column("id").to_numpy()
    updates = ids < gen.W2_BASE_ROWS
    assert updates.any() and (~updates).any()
    assert (rekeyed[updates] < base_rows).all()  # updates hit keys of the base
    assert (rekeyed[~updates] >= base_rows).all()  # inserts are new keys after it
    assert len(np.unique(rekeyed)) == len(np.unique(ids))  # distinct keys stay distinct
