"""One data file's deletion vector: the positions of its deleted rows, as a roaring bitmap.

Serialized as Paimon does (``BitmapDeletionVector`` / ``Bitmap64DeletionVector``), each framed as
``length (BE int) | bitmap data | CRC32 of the bitmap data (BE int)``:

- 32-bit: the data is the magic ``1581511376`` (BE int) then a portable RoaringBitmap; the
  index manifest records ``length`` = the data's size.
- 64-bit (``deletion-vectors.bitmap64``, Iceberg's layout): the data is the magic ``1681511377``
  (LE int) then a portable 64-bit roaring bitmap (LE bucket count, then each bucket's high 32 bits
  and its 32-bit bitmap); the manifest records the whole frame's size (data + 8).
"""

from __future__ import annotations

import array
import struct
import zlib

import numpy as np
from pyroaring import BitMap, BitMap64

from strata.errors import CorruptDataError

MAGIC_32 = 1581511376
MAGIC_64 = 1681511377
_MAGIC_64_AS_BE = struct.unpack(">i", struct.pack("<i", MAGIC_64))[0]
MAX_32_POSITION = 2**31 - 1


class DeletionVector:
    """Deleted row positions of one data file."""

    __slots__ = ("bitmap", "bitmap64")

    def __init__(self, bitmap64: bool = False, bitmap: BitMap | BitMap64 | None = None):
        self.bitmap64 = bitmap64
        self.bitmap = bitmap if bitmap is not None else (BitMap64() if bitmap64 else BitMap())

    @classmethod
    def from_positions(cls, positions: np.ndarray, bitmap64: bool = False) -> DeletionVector:
        vector = cls(bitmap64)
        vector.add(positions)
        return vector

    def add(self, positions: np.ndarray) -> None:
        if len(positions) == 0:
            return
        if not self.bitmap64 and int(np.max(positions)) > MAX_32_POSITION:
            raise ValueError("a 32-bit deletion vector holds positions up to 2^31-1: "
                             "set deletion-vectors.bitmap64=true for larger files")
        dtype = np.uint64 if self.bitmap64 else np.uint32
        # pyroaring adds an array.array in one call, but a numpy array one element at a time
        values = array.array("Q" if self.bitmap64 else "I")
        values.frombytes(np.ascontiguousarray(positions, dtype=dtype).tobytes())
        self.bitmap.update(values)

    def merge(self, other: DeletionVector) -> None:
        if self.bitmap64 != other.bitmap64:  # widths differ only when a table changes bitmap64
            self.add(other.positions())
        else:
            self.bitmap.update(other.bitmap)

    def positions(self) -> np.ndarray:
        """Deleted positions, sorted ascending, as int64."""
        if not self.bitmap:
            return np.empty(0, dtype=np.int64)
        array = self.bitmap.to_array()
        dtype = np.uint64 if self.bitmap64 else np.uint32
        return np.frombuffer(array, dtype=dtype).astype(np.int64)

    @property
    def cardinality(self) -> int:
        return len(self.bitmap)

    def __len__(self) -> int:
        return len(self.bitmap)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeletionVector) and self.positions().tolist() == other.positions().tolist()

    def __repr__(self) -> str:
        return f"DeletionVector({self.cardinality} deleted, {'64' if self.bitmap64 else '32'}-bit)"

    # -- Paimon's serialization ---------------------------------------------------------------------
    def serialize(self) -> tuple[bytes, int]:
        """(the framed bytes, the length the index manifest records for them)."""
        self.bitmap.run_optimize()
        if self.bitmap64:
            data = struct.pack("<i", MAGIC_64) + self.bitmap.serialize()
            frame = struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
            return frame, len(frame)
        data = struct.pack(">i", MAGIC_32) + self.bitmap.serialize()
        return struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data)), len(data)

    @classmethod
    def deserialize(cls, buffer: bytes | memoryview, offset: int, length: int | None, where: str) -> DeletionVector:
        """The vector framed at `offset` of `buffer`; `length` (from the index manifest) is checked."""
        try:
            data_length, magic = struct.unpack_from(">ii", buffer, offset)
        except struct.error:
            raise CorruptDataError(f"deletion vector at offset {offset} of {where} is truncated") from None
        start = offset + 4
        data = bytes(buffer[start:start + data_length])
        if len(data) != data_length or len(buffer) < start + data_length + 4:
            raise CorruptDataError(f"deletion vector at offset {offset} of {where} is truncated")
        (crc,) = struct.unpack_from(">I", buffer, start + data_length)
        if crc != zlib.crc32(data):
            raise CorruptDataError(f"deletion vector at offset {offset} of {where} fails its CRC32 check")
        if magic == MAGIC_32:
            expected = data_length
            bitmap64 = False
        elif magic == _MAGIC_64_AS_BE:
            expected = data_length + 8
            bitmap64 = True
        else:
            raise CorruptDataError(f"deletion vector at offset {offset} of {where} has an unknown magic number {magic}")
        if length is not None and length != expected:
            raise CorruptDataError(f"deletion vector at offset {offset} of {where}: the index manifest says "
                                   f"{length} bytes, the file {expected}")
        try:
            bitmap = (BitMap64 if bitmap64 else BitMap).deserialize(data[4:])
        except (ValueError, MemoryError) as exc:
            raise CorruptDataError(f"deletion vector at offset {offset} of {where} is corrupt: {exc}") from None
        return cls(bitmap64, bitmap)
