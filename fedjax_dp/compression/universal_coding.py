"""Universal source coding of quantized integer streams with bzip2.

Poster (seed 001), Algorithm 1 lines 10-11 and Algorithm 2 line 1: the
concatenated quantized gradient is encoded with *bzip*, which builds its own
codebook (Huffman tables after the Burrows-Wheeler and move-to-front
transforms), and the encoded vector with its codebook goes to the server.
The size reported here is therefore the real length of Python's
``bz2.compress`` output, headers and tables included, run outside ``jit`` on
the integers the client transmits.

Serialisation: the int32 lattice coordinates are written as little-endian
two's-complement integers of the narrowest width that holds them all (1, 2
or 4 bytes, one width per stream; the width is one byte of side information,
counted). Bits per value divide the coded bits by the number of model
weights n, so the figure compares directly with 32-bit floats.
"""

from __future__ import annotations

import bz2
from typing import NamedTuple

import numpy as np

BITS_PER_FLOAT = 32
COMPRESS_LEVEL = 9  # bzip2 -9: 900 kB blocks


class CodedSize(NamedTuple):
  """The coded size of one integer stream.

  Attributes:
    coded_bits: Bits of the bzip2 output plus the one width byte.
    num_values: The values the stream represents (model weights n).
    raw_bits: Bits of the fixed-width serialisation before bzip2.
    entropy_bits: Zeroth-order empirical entropy of the integers, times
      their number (a memoryless coder's ideal; for reference).
  """

  coded_bits: int
  num_values: int
  raw_bits: int
  entropy_bits: float

  @property
  def bits_per_value(self) -> float:
    """Coded bits per model weight."""
    return self.coded_bits / self.num_values

  @property
  def compression_factor(self) -> float:
    """32-bit floats over coded bits."""
    return BITS_PER_FLOAT * self.num_values / self.coded_bits


def pack_integers(ints: np.ndarray) -> bytes:
  """The narrowest little-endian fixed-width bytes of an integer stream."""
  ints = np.asarray(ints).reshape(-1)
  if ints.size == 0:
    return b""
  lo, hi = int(ints.min()), int(ints.max())
  for dtype in (np.int8, np.int16, np.int32):
    info = np.iinfo(dtype)
    if info.min <= lo and hi <= info.max:
      return ints.astype(dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
  raise ValueError(f"integers outside int32: [{lo}, {hi}]")


def encode(ints: np.ndarray) -> bytes:
  """bzip2 of the packed stream, prefixed by its width byte (decodable alone)."""
  packed = pack_integers(ints)
  width = len(packed) // max(np.asarray(ints).size, 1)
  return bytes([width]) + bz2.compress(packed, COMPRESS_LEVEL)


def decode(data: bytes) -> np.ndarray:
  """Inverse of :func:`encode`: the int64 stream."""
  width = data[0]
  packed = bz2.decompress(data[1:])
  if not packed:
    return np.zeros((0,), np.int64)
  dtype = {1: "<i1", 2: "<i2", 4: "<i4"}[width]
  return np.frombuffer(packed, dtype).astype(np.int64)


def empirical_entropy_bits(ints: np.ndarray) -> float:
  """Total zeroth-order empirical entropy of the stream, in bits."""
  ints = np.asarray(ints).reshape(-1)
  if ints.size == 0:
    return 0.0
  _, counts = np.unique(ints, return_counts=True)
  p = counts / ints.size
  return float(-ints.size * np.sum(p * np.log2(p)))


def coded_size(ints: np.ndarray, num_values: int | None = None) -> CodedSize:
  """Measures the bzip2-coded size of one transmitted integer stream.

  Args:
    ints: The integers one client sends (lattice coordinates, padding
      included).
    num_values: The values they stand for (n); default ``ints.size``.

  Returns:
    The :class:`CodedSize`.
  """
  ints = np.asarray(ints).reshape(-1)
  num_values = ints.size if num_values is None else int(num_values)
  if num_values < 1:
    raise ValueError(f"num_values must be >= 1, got {num_values}")
  packed_bits = 8 * len(pack_integers(ints))
  return CodedSize(8 * len(encode(ints)), num_values, packed_bits,
                   empirical_entropy_bits(ints))


def summarize(sizes: list[CodedSize]) -> dict:
  """Run-record fields of a run's measured streams (pooled over all of them).

  Returns:
    ``coded_bits_per_value`` (bzip2 bits per model weight),
    ``compression_factor`` (32 over it), ``raw_bits_per_value`` (fixed
    width before bzip2), ``entropy_bits_per_value`` (zeroth-order
    empirical entropy) and ``measured_streams``; all None without streams.
  """
  if not sizes:
    return {"coded_bits_per_value": None, "compression_factor": None,
            "raw_bits_per_value": None, "entropy_bits_per_value": None,
            "measured_streams": 0}
  values = sum(s.num_values for s in sizes)
  coded = sum(s.coded_bits for s in sizes)
  return {"coded_bits_per_value": coded / values,
          "compression_factor": BITS_PER_FLOAT * values / coded,
          "raw_bits_per_value": sum(s.raw_bits for s in sizes) / values,
          "entropy_bits_per_value": sum(s.entropy_bits for s in sizes) / values,
          "measured_streams": len(sizes)}
