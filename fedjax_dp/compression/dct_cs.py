"""The chunked partial-DCT compression operator of FL-CS, and its adjoint.

Thesis Sec. 4.1.4 ("Scalable Reconstruction"): the flat update is shuffled by
a permutation every party derives from a shared seed, split into P equal
chunks, and each chunk is compressed to its first m/P coefficients of the
orthonormal DCT-II (Eq. 2.3 with Phi the first rows of the DCT matrix and
Psi = I). The operator is linear, so the secure sum of compressed updates is
the compression of the sum (thesis Sec. 2.3):

  C(x) = vec( first_mc( DCT-II_ortho( chunks( x[perm] ) ) ) ),
  C^T(y) = its adjoint (inverse DCT of the zero-padded coefficients).

Layout. Chunk p holds the next ``n // P + (p < n % P)`` permuted values
followed by zeros up to the chunk length L. L is the smallest 7-smooth number
>= ceil(n / P) (``fast_length``), so the FFT path runs at full speed; the
padding carries no unknowns (the decoder keeps it at zero).

Two exact implementations of the same operator, chosen per ratio:

* ``"matmul"``: the first mc rows of the DCT matrix form one dense (mc, L)
  matrix shared by every chunk, so C is one (P, L) @ (L, mc) matmul and C^T
  one (P, mc) @ (mc, L); cost 2 n mc per pass, best for small mc.
* ``"fft"``: Makhoul's DCT through a length-L real FFT; cost ~ n log L per
  pass whatever mc. Makhoul's even/odd reordering is folded into the shared
  permutation, so the chunk domain is stored in that order and no extra
  shuffle is paid per pass (every decoder step but the transform itself is
  elementwise, hence order-free).

Inside the decoder everything stays in the (P, L) chunk domain:
``to_chunks`` / ``from_chunks`` convert to and from the flat n-vector and
``forward`` / ``adjoint`` apply the per-chunk matrix.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

METHODS = ("auto", "fft", "matmul")
# "auto" uses the matmul while mc <= this (measured crossover on the 2-core Xeon
# of this workplace: the matmul costs ~2 n mc flops a pass, the FFT ~n log L;
# benchmarks/cs_decoder.py --method fft|matmul).
AUTO_MATMUL_MAX_COEFFS = 150


def fast_length(size: int) -> int:
  """The smallest 7-smooth integer >= size (fast FFT length)."""
  n = max(1, size)
  while True:
    m = n
    for p in (2, 3, 5, 7):
      while m % p == 0:
        m //= p
    if m == 1:
      return n
    n += 1


def coeffs_per_chunk(num_params: int, ratio: float, chunks: int) -> int:
  """mc = round(r n / P), the DCT coefficients kept per chunk.

  Raises:
    ValueError: For r outside (0, 1], P < 1 or P > n, or a ratio that leaves
      fewer than one coefficient per chunk (r n < P).
  """
  if not 0.0 < ratio <= 1.0:
    raise ValueError(f"ratio must be in (0, 1], got {ratio}")
  if chunks < 1:
    raise ValueError(f"chunks must be >= 1, got {chunks}")
  if chunks > num_params:
    raise ValueError(f"chunks P = {chunks} exceeds the number of weights n = {num_params}")
  if ratio * num_params < chunks:
    raise ValueError(
        f"ratio {ratio} leaves fewer than one DCT coefficient per chunk "
        f"(r*n = {ratio * num_params:.1f} < P = {chunks}); raise the ratio or "
        "lower the number of chunks")
  chunk_len = -(-num_params // chunks)
  return max(1, min(chunk_len, int(round(ratio * num_params / chunks))))


def _dct_rows(chunk_len: int, coeffs: int) -> np.ndarray:
  """(coeffs, L) first rows of the orthonormal DCT-II matrix (float64)."""
  k = np.arange(coeffs)[:, None]
  j = np.arange(chunk_len)[None, :]
  rows = np.cos(np.pi * k * (2 * j + 1) / (2 * chunk_len)) * np.sqrt(2.0 / chunk_len)
  rows[0] /= np.sqrt(2.0)
  return rows


def _makhoul_order(chunk_len: int) -> np.ndarray:
  """order[i] = the natural index stored at Makhoul position i.

  v_i = x_{2i} for i < ceil(L/2), v_{L-1-i} = x_{2i+1} for i < floor(L/2).
  """
  order = np.empty(chunk_len, np.int64)
  even = np.arange(0, chunk_len, 2)
  order[:even.size] = even
  odd = np.arange(1, chunk_len, 2)
  order[chunk_len - 1 - np.arange(odd.size)] = odd
  return order


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChunkedDCT:
  """The FL-CS compression operator C and its adjoint (a pytree).

  Create with :func:`make_operator`. Array fields are the shared randomness
  and precomputed constants; the shape fields are static.

  Attributes:
    gather: (P*L,) int32; chunk-domain slot i holds ``x_pad[gather[i]]`` with
      ``x_pad = concat(x, [0])`` (index n is a padding zero).
    scatter: (n,) int32; the chunk-domain slot of each weight.
    coef_re, coef_im: (mc,) FFT path: coefficient k of a chunk is
      ``coef_re[k] Re V[bins[k]] + coef_im[k] Im V[bins[k]]`` with V its rfft.
    adj_re, adj_im: (mc,) FFT path: adjoint weights (see :meth:`adjoint`).
    rows: (mc, L) matmul path: the DCT rows in the stored (Makhoul) order;
      (0, L) on the FFT path.
    num_params: n.
    chunks: P.
    chunk_len: L.
    coeffs: mc, coefficients kept per chunk (message length m = P * mc).
    method: "fft" or "matmul".
  """

  gather: jax.Array
  scatter: jax.Array
  coef_re: jax.Array
  coef_im: jax.Array
  adj_re: jax.Array
  adj_im: jax.Array
  rows: jax.Array
  num_params: int = dataclasses.field(metadata=dict(static=True))
  chunks: int = dataclasses.field(metadata=dict(static=True))
  chunk_len: int = dataclasses.field(metadata=dict(static=True))
  coeffs: int = dataclasses.field(metadata=dict(static=True))
  method: str = dataclasses.field(metadata=dict(static=True))

  @property
  def num_values(self) -> int:
    """m = P * mc, the length of a compressed vector."""
    return self.chunks * self.coeffs

  @property
  def mask(self) -> jax.Array:
    """(P, L) float32: 1 on slots that hold a weight, 0 on padding.

    Computed from iotas (stored slot -> natural position in the chunk, see
    ``_makhoul_order``), so inside ``jit`` it fuses into its consumer
    instead of being read from memory.
    """
    shape = (self.chunks, self.chunk_len)
    slot = jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    chunk = jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    natural = jnp.where(slot < (self.chunk_len + 1) // 2, 2 * slot,
                        2 * (self.chunk_len - 1 - slot) + 1)
    size = self.num_params // self.chunks + (chunk < self.num_params % self.chunks)
    return (natural < size).astype(jnp.float32)

  @property
  def _bins(self) -> np.ndarray:
    k = np.arange(self.coeffs)
    return np.where(k <= self.chunk_len // 2, k, self.chunk_len - k)

  def to_chunks(self, x: jax.Array) -> jax.Array:
    """(n,) -> (P, L): shuffle, chunk and zero-pad (stored order)."""
    x_pad = jnp.concatenate([x, jnp.zeros((1,), x.dtype)])
    return x_pad[self.gather].reshape(self.chunks, self.chunk_len)

  def from_chunks(self, chunks: jax.Array) -> jax.Array:
    """(P, L) -> (n,): the inverse of :meth:`to_chunks` (padding dropped)."""
    return chunks.reshape(-1)[self.scatter]

  def forward(self, chunks: jax.Array) -> jax.Array:
    """(P, L) -> (P, mc): first mc orthonormal DCT-II coefficients per chunk."""
    if self.method == "matmul":
      return jnp.dot(chunks, self.rows.T, precision=jax.lax.Precision.HIGHEST)
    spec = jnp.fft.rfft(chunks, axis=-1)
    if self.coeffs <= self.chunk_len // 2 + 1:
      spec = spec[:, :self.coeffs]
    else:
      spec = spec[:, self._bins]
    return jnp.real(spec) * self.coef_re + jnp.imag(spec) * self.coef_im

  def adjoint(self, coeffs: jax.Array) -> jax.Array:
    """(P, mc) -> (P, L): the transpose of :meth:`forward`.

    FFT path: the transpose of ``v -> Re(c_k V_k)`` is ``j -> Re(sum_k c_k R_k
    e^{+2 pi i j k / L})``, an unnormalised inverse DFT of a half spectrum;
    ``irfft(norm="forward")`` computes it once the bins strictly between 0
    and L/2 are halved (folded into ``adj_re``/``adj_im``).
    """
    if self.method == "matmul":
      return jnp.dot(coeffs, self.rows, precision=jax.lax.Precision.HIGHEST)
    half = jax.lax.complex(coeffs * self.adj_re, coeffs * self.adj_im)
    num_bins = self.chunk_len // 2 + 1
    if self.coeffs <= num_bins:
      spec = jnp.pad(half, ((0, 0), (0, num_bins - self.coeffs)))
    else:
      spec = jnp.zeros((self.chunks, num_bins), half.dtype).at[:, self._bins].add(half)
    return jnp.fft.irfft(spec, n=self.chunk_len, axis=-1, norm="forward")

  def encode(self, x: jax.Array) -> jax.Array:
    """C(x): (n,) -> (m,)."""
    return self.forward(self.to_chunks(x)).reshape(-1)

  def decode_adjoint(self, y: jax.Array) -> jax.Array:
    """C^T(y): (m,) -> (n,), the inverse DCT of the zero-padded coefficients."""
    return self.from_chunks(self.adjoint(y.reshape(self.chunks, self.coeffs)))


def make_operator(key: jax.Array, num_params: int, ratio: float, chunks: int = 200,
                  method: str = "auto", pad_to_fast_length: bool = True) -> ChunkedDCT:
  """Builds the FL-CS operator from the shared seed (thesis Sec. 4.1.4).

  Args:
    key: The shared key every party derives the permutation from.
    num_params: n.
    ratio: r; m = P * round(r n / P) values are kept.
    chunks: P (the thesis uses 200).
    method: "fft", "matmul", or "auto" (matmul for mc <= 150, else FFT).
    pad_to_fast_length: Pad chunks to a 7-smooth length (fast FFT); False
      keeps L = ceil(n / P).

  Returns:
    The operator.

  Raises:
    ValueError: On bad parameters (see :func:`coeffs_per_chunk`) or method.
  """
  if method not in METHODS:
    raise ValueError(f"unknown DCT method {method!r}; choose one of {', '.join(METHODS)}")
  mc = coeffs_per_chunk(num_params, ratio, chunks)
  base_len = -(-num_params // chunks)
  chunk_len = fast_length(base_len) if pad_to_fast_length else base_len
  if method == "auto":
    method = "matmul" if mc <= AUTO_MATMUL_MAX_COEFFS else "fft"

  perm = np.asarray(jax.random.permutation(key, num_params)).astype(np.int64)
  sizes = num_params // chunks + (np.arange(chunks) < num_params % chunks)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  order = _makhoul_order(chunk_len)  # stored slot i <- natural position order[i]
  natural = np.broadcast_to(order, (chunks, chunk_len))
  real = natural < sizes[:, None]
  src = np.where(real, starts[:, None] + natural, 0)
  gather = np.where(real, perm[src], num_params)
  scatter = np.empty(num_params, np.int64)
  slots = np.arange(chunks * chunk_len).reshape(chunks, chunk_len)
  scatter[gather[real]] = slots[real]

  k = np.arange(mc)
  scale = np.where(k == 0, np.sqrt(1.0 / chunk_len), np.sqrt(2.0 / chunk_len))
  phase = -np.pi * k / (2 * chunk_len)  # X_k = scale * Re(e^{i phase} V_k)
  upper = k > chunk_len // 2  # V_k = conj(V_{L-k}) there
  coef_re = scale * np.cos(phase)
  coef_im = np.where(upper, 1.0, -1.0) * scale * np.sin(phase)
  bins = np.where(upper, chunk_len - k, k)
  halve = (bins > 0) & (2 * bins != chunk_len)
  adj_scale = np.where(halve, 0.5, 1.0)
  if method == "matmul":
    rows = _dct_rows(chunk_len, mc)[:, order]
  else:
    rows = np.zeros((0, chunk_len))
  f32 = lambda a: jnp.asarray(a, jnp.float32)
  return ChunkedDCT(
      gather=jnp.asarray(gather.reshape(-1), jnp.int32), scatter=jnp.asarray(scatter, jnp.int32),
      coef_re=f32(coef_re), coef_im=f32(coef_im),
      adj_re=f32(coef_re * adj_scale), adj_im=f32(coef_im * adj_scale), rows=f32(rows),
      num_params=num_params, chunks=chunks, chunk_len=chunk_len, coeffs=mc,
      method=method)
