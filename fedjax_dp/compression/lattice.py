"""Dithered lattice quantization: the scalar lattice and the hexagonal A2.

Poster (seed 001, "Compressive DP FL through universal vector quantization"),
Algorithm 1 lines 7-9 and "Our Solution": the clipped, Gaussian-perturbed
gradient is split into lattice vectors of size L, a dither is added and each
vector is mapped to its nearest lattice point. With a *subtractive* dither
(Zamir and Feder 1992, the poster's ref. [1]) -- u uniform over the Voronoi
cell V of the lattice, drawn from a key the server shares, added before
quantization and subtracted after decoding -- the quantization error
``Q(x + u) - u - x`` is uniform over V and independent of x, whatever x is
(Zamir and Feder 1996, ref. [2]). Its variance per dimension is
``G(Lambda) * vol(V)^(2/d)``: ``Delta^2 / 12`` for the scalar lattice
``Delta Z`` (G = 1/12) and ``5 Delta^2 / 72`` for the hexagonal lattice of
minimum distance Delta (G(A2) = 5 / (36 sqrt 3), cell area sqrt(3)/2 Delta^2).

A vector of size L is quantized in the product lattice: ``(Delta Z)^L`` for
"scalar" (any L >= 1) and ``A2^(L/2)`` for "hexagonal" (L even), so L sets
how the flat vector is grouped (and padded) and the per-dimension error is
that of the component lattice. What is transmitted is the integer
coordinates of the lattice points in the lattice basis: for ``Delta Z`` the
integer k of ``k Delta``; for A2 the pair (a, b) of ``a b1 + b b2`` with
``b1 = Delta (1, 0)`` and ``b2 = Delta (1/2, sqrt(3)/2)``.

Nearest-point search in A2 (Conway and Sloane, *Sphere Packings*, Ch. 20):
A2 is the union of the rectangular lattice ``Delta (Z x sqrt(3) Z)`` and its
coset shifted by ``b2``; the nearest point of each is found by rounding each
coordinate, and the closer of the two is the nearest point of A2.

Every function is pure and jittable; the :class:`Lattice` is a hashable
static argument.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

KINDS = ("scalar", "hexagonal")
SQRT3 = math.sqrt(3.0)
# Normalised second moments G = E||e||^2 / (d vol(V)^(2/d)) (Conway-Sloane Ch. 2-3).
G_SCALAR = 1.0 / 12.0
G_HEXAGONAL = 5.0 / (36.0 * SQRT3)


@dataclasses.dataclass(frozen=True)
class Lattice:
  """A product lattice for vectors of size ``dim`` with step ``step``.

  Build it with :func:`make_lattice`, which validates the arguments.

  Attributes:
    kind: "scalar" (``step * Z`` per coordinate) or "hexagonal" (A2 of
      minimum distance ``step`` per pair of coordinates).
    step: Delta > 0, the quantization step (nearest-neighbour distance).
    dim: L, the lattice vector size (a multiple of :attr:`block`).
  """

  kind: str
  step: float
  dim: int

  @property
  def block(self) -> int:
    """Dimension of the component lattice: 1 (scalar) or 2 (A2)."""
    return 1 if self.kind == "scalar" else 2

  @property
  def cell_volume(self) -> float:
    """Volume of the component lattice's Voronoi cell (Delta, or sqrt(3)/2 Delta^2)."""
    return self.step if self.kind == "scalar" else SQRT3 / 2.0 * self.step ** 2

  @property
  def normalized_second_moment(self) -> float:
    """G of the component lattice: 1/12, or 5/(36 sqrt 3) ~ 0.0802 for A2."""
    return G_SCALAR if self.kind == "scalar" else G_HEXAGONAL

  @property
  def error_variance(self) -> float:
    """Per-coordinate variance of the dithered error, ``G vol^(2/d)``.

    ``Delta^2 / 12`` (scalar) or ``5 Delta^2 / 72`` (hexagonal).
    """
    return self.normalized_second_moment * self.cell_volume ** (2.0 / self.block)

  def padded_size(self, n: int) -> int:
    """Length of an n-vector padded with zeros to whole lattice vectors."""
    return -(-n // self.dim) * self.dim


def make_lattice(kind: str, step: float, dim: int | None = None) -> Lattice:
  """Validates and builds a :class:`Lattice`.

  Args:
    kind: "scalar" or "hexagonal".
    step: Delta > 0.
    dim: L, the lattice vector size; default 1 (scalar) or 2 (hexagonal).
      Hexagonal needs an even L (L/2 copies of A2).

  Raises:
    ValueError: With a one-line message for a bad argument.
  """
  if kind not in KINDS:
    raise ValueError(f"unknown lattice {kind!r}; choose one of {', '.join(KINDS)}")
  if not (isinstance(step, (int, float)) and math.isfinite(step) and step > 0):
    raise ValueError(f"step must be > 0, got {step}")
  block = 1 if kind == "scalar" else 2
  dim = block if dim is None else dim
  if int(dim) != dim or dim < 1:
    raise ValueError(f"dim must be a positive int, got {dim}")
  if dim % block:
    raise ValueError(f"dim must be even for the hexagonal lattice "
                     f"(L/2 copies of A2), got {dim}")
  return Lattice(kind, float(step), int(dim))


def _hexagonal_nearest(p: jax.Array) -> jax.Array:
  """Integer basis coordinates (a, b) of the A2 points nearest to ``p``.

  Args:
    p: (..., 2) points in units of Delta.

  Returns:
    (..., 2) int32 (a, b): the point is ``a (1, 0) + b (1/2, sqrt(3)/2)``.
  """
  x, y = p[..., 0], p[..., 1]
  # Coset 0: (i, sqrt3 j) = a b1 + b b2 with b = 2j, a = i - j.
  i0, j0 = jnp.round(x), jnp.round(y / SQRT3)
  d0 = (x - i0) ** 2 + (y - SQRT3 * j0) ** 2
  # Coset 1: (i + 1/2, sqrt3 (j + 1/2)) with b = 2j + 1, a = i - j.
  i1, j1 = jnp.round(x - 0.5), jnp.round(y / SQRT3 - 0.5)
  d1 = (x - i1 - 0.5) ** 2 + (y - SQRT3 * (j1 + 0.5)) ** 2
  first = d0 <= d1
  a = jnp.where(first, i0 - j0, i1 - j1)
  b = jnp.where(first, 2.0 * j0, 2.0 * j1 + 1.0)
  return jnp.stack([a, b], axis=-1).astype(jnp.int32)


def _blocks(lattice: Lattice, x: jax.Array) -> jax.Array:
  """(n,) -> (padded / block, block), zero-padded to whole lattice vectors."""
  n = x.shape[0]
  x = jnp.pad(x, (0, lattice.padded_size(n) - n))
  return x.reshape(-1, lattice.block)


@functools.partial(jax.jit, static_argnames=("lattice",))
def nearest_coordinates(x: jax.Array, lattice: Lattice) -> jax.Array:
  """Integer coordinates of the lattice points nearest to a flat vector.

  Args:
    x: (n,) real vector.
    lattice: The lattice.

  Returns:
    (padded_size(n),) int32 coordinates in the lattice basis (the stream a
    client transmits), block after block.
  """
  p = _blocks(lattice, x) / lattice.step
  if lattice.kind == "scalar":
    return jnp.round(p).astype(jnp.int32).reshape(-1)
  return _hexagonal_nearest(p).reshape(-1)


@functools.partial(jax.jit, static_argnames=("lattice", "n"))
def decode(coords: jax.Array, lattice: Lattice, n: int) -> jax.Array:
  """The lattice points of integer coordinates, as a flat (n,) float32 vector."""
  c = coords.reshape(-1, lattice.block).astype(jnp.float32)
  if lattice.kind == "scalar":
    points = c
  else:
    points = jnp.stack([c[:, 0] + 0.5 * c[:, 1], (SQRT3 / 2.0) * c[:, 1]], axis=-1)
  return (lattice.step * points).reshape(-1)[:n]


@functools.partial(jax.jit, static_argnames=("lattice",))
def nearest_point(x: jax.Array, lattice: Lattice) -> jax.Array:
  """Q(x): the nearest lattice point of each lattice vector of ``x``."""
  return decode(nearest_coordinates(x, lattice), lattice, x.shape[0])


@functools.partial(jax.jit, static_argnames=("lattice", "n"))
def dither(key: jax.Array, lattice: Lattice, n: int) -> jax.Array:
  """A subtractive dither: (n,) uniform over the Voronoi cell, from ``key`` alone.

  Scalar: U[-Delta/2, Delta/2) per coordinate. Hexagonal: a uniform point of
  the fundamental parallelogram ``{s b1 + t b2 : s, t in [0, 1)}`` reduced
  modulo A2 (minus its nearest lattice point), which is uniform over the
  hexagonal cell because the parallelogram tiles the plane under A2. For an
  odd n this is the first n values of the padded vector's dither, which
  :func:`quantize` adds to the padded vector whole.

  The draw depends on the key and the length only, never on the quantized
  vector (Zamir-Feder's condition for an input-independent error); the
  server regenerates it from the shared key.
  """
  return _padded_dither(key, lattice, lattice.padded_size(n))[:n]


def _padded_dither(key: jax.Array, lattice: Lattice, size: int) -> jax.Array:
  """:func:`dither` of a vector of whole lattice vectors (``size`` values)."""
  if lattice.kind == "scalar":
    return lattice.step * jax.random.uniform(key, (size,), jnp.float32, -0.5, 0.5)
  st = jax.random.uniform(key, (size // 2, 2), jnp.float32)
  p = jnp.stack([st[:, 0] + 0.5 * st[:, 1], (SQRT3 / 2.0) * st[:, 1]], axis=-1)
  c = _hexagonal_nearest(p).astype(jnp.float32)
  q = jnp.stack([c[:, 0] + 0.5 * c[:, 1], (SQRT3 / 2.0) * c[:, 1]], axis=-1)
  return (lattice.step * (p - q)).reshape(-1)


@functools.partial(jax.jit, static_argnames=("lattice",))
def quantize(x: jax.Array, key: jax.Array, lattice: Lattice) -> jax.Array:
  """Encoder of subtractive dithered quantization: coordinates of ``Q(x + u)``.

  Args:
    x: (n,) vector.
    key: The dither key (shared with the decoder, independent of x).
    lattice: The lattice.

  Returns:
    (padded_size(n),) int32 lattice coordinates, the transmitted stream.
  """
  # The zeros that pad x to whole lattice vectors are dithered too: an odd
  # hexagonal vector's last pair is then (x_n, 0) + u, whose error is uniform
  # over the cell (with the pad undithered, x_n's error depended on x_n).
  size = lattice.padded_size(x.shape[0])
  padded = jnp.pad(x, (0, size - x.shape[0]))
  return nearest_coordinates(padded + _padded_dither(key, lattice, size), lattice)


@functools.partial(jax.jit, static_argnames=("lattice", "n"))
def dequantize(coords: jax.Array, key: jax.Array, lattice: Lattice, n: int) -> jax.Array:
  """Decoder: ``Q(x + u) - u``, i.e. x plus an error uniform over the cell."""
  size = lattice.padded_size(n)
  return (decode(coords, lattice, size) - _padded_dither(key, lattice, size))[:n]
