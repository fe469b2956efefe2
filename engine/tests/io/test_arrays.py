"""strata.io.arrays converts like pyarrow's own to_numpy and pa.array, for every type, offset and
null layout it takes a shortcut for, and falls back to them for the rest."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.io.arrays import from_numpy, scalar, to_numpy

NUMBERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
           pa.float32(), pa.float64()]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(NUMBERS), st.lists(st.integers(0, 100), min_size=0, max_size=50),
       st.integers(0, 10), st.integers(0, 50), st.booleans())
def test_numbers_convert_like_pyarrow(kind: pa.DataType, values: list[int], start: int, length: int,
                                      chunked: bool) -> None:
    array = pa.array(values, kind).slice(start, length)
    column = pa.chunked_array([array, array], kind) if chunked else array
    reference = column.to_numpy() if chunked else array.to_numpy(zero_copy_only=False)
    got = to_numpy(column)
    assert got.dtype == reference.dtype and got.tolist() == reference.tolist()
    assert from_numpy(got).equals(pa.array(reference, kind))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.booleans(), max_size=70), st.integers(0, 20), st.integers(0, 70))
def test_booleans_convert_like_pyarrow_at_any_bit_offset(values: list[bool], start: int, length: int) -> None:
    array = pa.array(values, pa.bool_()).slice(start, length)
    got = to_numpy(array)
    assert got.dtype == np.bool_ and got.tolist() == array.to_pylist()
    assert from_numpy(got).equals(pa.array(got.tolist(), pa.bool_()))


@pytest.mark.parametrize("array", [
    pa.array([0, 86_400_000, None], pa.timestamp("ms")).slice(0, 2), pa.array([1, 19_000], pa.date32()),
    pa.array([0, 5], pa.timestamp("us", tz="UTC")),
])
def test_dates_and_timestamps_come_back_as_their_integers(array: pa.Array) -> None:
    width = pa.int32() if pa.types.is_date32(array.type) else pa.int64()
    assert to_numpy(array).tolist() == array.cast(width).to_pylist()


def test_nulls_and_other_types_fall_back_to_pyarrow() -> None:
    with_null = pa.array([1, None, 3])
    assert np.isnan(to_numpy(with_null)[1]) and to_numpy(with_null)[2] == 3
    assert to_numpy(pa.array(["a", "b"])).tolist() == ["a", "b"]
    assert from_numpy(np.array(["x"], dtype=object)).to_pylist() == ["x"]


@pytest.mark.parametrize(("value", "kind"), [
    (-5, pa.int8()), (2**63 - 1, pa.int64()), (2**64 - 1, pa.uint64()), (7, pa.uint16()),
    ("día", pa.string()), ("", pa.string()), (b"\x00\xff", pa.binary()),
])
def test_scalars_equal_pyarrows(value: object, kind: pa.DataType) -> None:
    assert scalar(value, kind).equals(pa.scalar(value, kind))
