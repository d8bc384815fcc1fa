"""The chunked partial-DCT compression operator of FL-CS, and its adjoint.

Thesis Sec. 4.1.4 ("Scalable Reconstruction"): the flat update is shuffled by
a permutation every party derives from a shared seed, split into P equal
chunks, and each chunk is compressed to its first m/P coefficients of the
orthonormal DCT-II (Eq. 2.3 with Phi the first rows of the DCT matrix and
Psi = I). The operator is linear, so the secure sum of compressed updates is
the compression of the sum (thesis Sec. 2.3):

  C(x) = vec( first_mc( DCT-II_ortho( chunks( x[perm] ) ) ) ),
  C^T(y) = its adjoint (inverse DCT of the zero-padded coefficients).

Layout. Chunk p holds the next ``n_p = n // P + (p < n % P)`` permuted
values and ``c_p = L - n_p`` zeros. L is the smallest 7-smooth number
>= ceil(n / P) (``fast_length``), so the FFT path runs at full speed; the
padding carries no unknowns (the decoder keeps it at zero). The zeros sit at
evenly spread positions of the chunk (``_holds_weight``: every
``L // c_p``-th position), not in one block at its end. That matters for
FL-CS: the mc low-frequency DCT rows restricted to the real positions must
stay well-conditioned, or some compressed directions are reachable by no
weight change, and DP noise in them random-walks in the server's error
feedback (the FL-CS-DP collapse). For the paper CNN (n = 1,663,370,
P = 200: 8,316 or 8,317 weights in L = 8,400; 8,317 is prime, so equal
unpadded chunks are impossible) a block of 83-84 zeros leaves Gram
eigenvalues 1e-10, 5e-7, 3e-4, ... at r = 5% and exact zeros at 10-20%;
spread zeros leave every eigenvalue >= 0.79 for r <= 20% (tested).

Three exact implementations of the same operator. All use Makhoul's form of
the DCT-II through a length-L DFT (even samples first, odd ones reversed),
and fold that reordering into the shared permutation, so it costs nothing per
pass (every decoder step but the transform itself is elementwise, hence
order-free):

* ``"matmul"``: the first mc rows of the DCT matrix form one dense (mc, L)
  matrix shared by every chunk, so C is one (P, L) @ (L, mc) matmul and C^T
  one (P, mc) @ (mc, L); cost 2 n mc flops per pass.
* ``"fft"``: a length-L real FFT per chunk; ~n log L per pass whatever mc,
  but an FFT is bound by memory traffic, not by arithmetic.
* ``"factored"``: the pruned DFT as two small matmuls (decimation in time).
  With L = Q * Ls and Makhoul position j = l + Ls q,

    V_k = sum_l e^{-2 pi i l k / L} U_l[k mod Q],
    U_l[r] = sum_q v_{l + Ls q} e^{-2 pi i q r / Q},

  so stage 1 is one (Q//2 + 1 complex rows, Q) DFT matrix applied to all
  P * Ls sub-sequences (residues r > Q/2 are conjugates, U[Q-r] = conj U[r]),
  and stage 2 is, for each residue r, a (P, Ls) @ (Ls, ~2 mc / Q) product
  that yields the coefficients k = r, Q - r (mod Q). The twiddles and the
  DCT's own scale and phase are folded into stage 2's weights. Cost
  ~ n (2 Q + 4 mc / Q) flops per pass, ~ 6.9x less than ``"matmul"`` at
  r = 5% (Q = 35 for L = 8400, mc = 416: 121 flops a value against 2 mc =
  832), and dense matmuls run near the
  CPU's peak, which an FFT does not. The chunk domain is stored as
  (Q, P, Ls) so that both stages are plain (batched) matmuls.

Inside the decoder everything stays in the chunk domain (``domain_shape``:
(P, L), or (Q, P, Ls) for ``"factored"``): ``to_chunks`` / ``from_chunks``
convert to and from the flat n-vector and ``forward`` / ``adjoint`` apply the
per-chunk matrix, from and to (P, mc) coefficients.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

METHODS = ("auto", "factored", "fft", "matmul")
_HIGHEST = jax.lax.Precision.HIGHEST  # full f32 products (no TF32/bf16 passes on GPU)
# "auto" uses the dense matmul while mc <= this (see ``_auto_method``).
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
  """mc = round(r n / P), the DCT coefficients kept per chunk, at most n // P,
  the weights of the smallest chunk (at r = 1 a chunk of n // P weights given
  more coefficients would have a compressed direction no weight change can
  reach, and FL-FREQ would not be the identity).

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
  return max(1, min(num_params // chunks, int(round(ratio * num_params / chunks))))


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


def _factor_cost(chunk_len: int, coeffs: int, q: int) -> float:
  """Flops per chunk value of one ``"factored"`` pass with stage length Q."""
  num_res = q // 2 + 1
  width = _stage2_width(q, coeffs)
  return 4.0 * num_res + 4.0 * num_res * width / q


def _stage2_width(q: int, coeffs: int) -> int:
  """T: most coefficients k < mc that share one residue pair {r, Q - r}."""
  counts = np.bincount(np.arange(coeffs) % q, minlength=q)
  pair = counts[:q // 2 + 1].copy()
  pair[1:(q + 1) // 2] += counts[q - 1:q // 2:-1]  # add the conjugate residue Q - r
  return int(pair.max())


def choose_factor(chunk_len: int, coeffs: int) -> int:
  """The divisor Q of L (Q >= 2) that minimises the ``"factored"`` cost.

  Returns L itself when L is prime (then ``"factored"`` is a plain DFT and
  ``"auto"`` does not pick it).
  """
  divisors = [q for q in range(2, chunk_len + 1) if chunk_len % q == 0]
  return min(divisors, key=lambda q: (_factor_cost(chunk_len, coeffs, q), q))


def _domain_positions(shape: tuple[int, ...], factored: bool, xp):
  """(chunk p, Makhoul position j) of every chunk-domain slot.

  (P, L) domain: slot (p, j). Factored (Q, P, Ls) domain: slot (q, p, l)
  holds j = l + Ls q. ``xp`` is numpy or jax.numpy (iotas inside jit).
  """
  if xp is np:
    grids = np.indices(shape)
  else:
    grids = [jax.lax.broadcasted_iota(jnp.int32, shape, d) for d in range(len(shape))]
  if factored:
    return grids[1], grids[2] + shape[2] * grids[0]
  return grids[0], grids[1]


def _holds_weight(natural, size, chunk_len: int, xp):
  """Whether natural position ``natural`` of a chunk with ``size`` weights holds one.

  The ``c = L - size`` padding zeros sit at positions ``s // 2 + s i``
  (i < c) with stride ``s = L // c``: spread evenly over the chunk, so that
  no band of low frequencies concentrates on them (see the module
  docstring). Integer arithmetic only, so numpy (``make_operator``) and
  jax.numpy (``ChunkedDCT.mask``, from iotas inside jit) agree exactly.
  """
  pad = chunk_len - size
  stride = chunk_len // xp.maximum(pad, 1)
  padded = (pad > 0) & (natural % stride == stride // 2) & (natural // stride < pad)
  return ~padded


def _auto_method(chunk_len: int, coeffs: int) -> str:
  """The fastest path, by ``benchmarks/cs_decoder.py --method ...`` side by side.

  The matmul is as fast as ``"factored"`` for small mc (r = 0.5%: mc = 42)
  and needs no intermediate arrays; ``"factored"`` wins above (its margin
  over the FFT: docs/schemes.md, "Decoder cost", and docs/performance.md,
  "Figures behind the code's choices"); the FFT is the fallback when L has
  no useful factor (a prime chunk length).
  """
  if coeffs <= AUTO_MATMUL_MAX_COEFFS:
    return "matmul"
  q = choose_factor(chunk_len, coeffs)
  if q < chunk_len and _factor_cost(chunk_len, coeffs, q) < 2.0 * coeffs:
    return "factored"
  return "fft"


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
    rows: (mc, L) matmul path: the DCT rows in the stored (Makhoul) order.
    stage1: (2 R, Q) factored path: rows ``cos(2 pi q r / Q)`` then
      ``-sin(2 pi q r / Q)`` for residues r < R = Q // 2 + 1.
    stage2: (2 R, Ls, T) factored path: coefficient slot (r, t) is
      ``sum_l stage2[r, l, t] Re U_l[r] + stage2[R + r, l, t] Im U_l[r]``.
    coef_slot: (mc,) factored path: the (r, t) slot (as r * T + t) of each
      coefficient k.
    slot_coef: (R * T,) factored path: the coefficient of each slot, mc for
      an unused slot.
    num_params: n.
    chunks: P.
    chunk_len: L.
    coeffs: mc, coefficients kept per chunk (message length m = P * mc).
    method: "factored", "fft" or "matmul".
    factor: Q for "factored", else 1 (then the chunk domain is (P, L)).

  Arrays a method does not use have a zero-size leading axis.
  """

  gather: jax.Array
  scatter: jax.Array
  coef_re: jax.Array
  coef_im: jax.Array
  adj_re: jax.Array
  adj_im: jax.Array
  rows: jax.Array
  stage1: jax.Array
  stage2: jax.Array
  coef_slot: jax.Array
  slot_coef: jax.Array
  num_params: int = dataclasses.field(metadata=dict(static=True))
  chunks: int = dataclasses.field(metadata=dict(static=True))
  chunk_len: int = dataclasses.field(metadata=dict(static=True))
  coeffs: int = dataclasses.field(metadata=dict(static=True))
  method: str = dataclasses.field(metadata=dict(static=True))
  factor: int = dataclasses.field(default=1, metadata=dict(static=True))

  @property
  def num_values(self) -> int:
    """m = P * mc, the length of a compressed vector."""
    return self.chunks * self.coeffs

  @property
  def domain_shape(self) -> tuple[int, ...]:
    """Shape of the chunk domain: (P, L), or (Q, P, L / Q) for "factored"."""
    if self.method == "factored":
      return (self.factor, self.chunks, self.chunk_len // self.factor)
    return (self.chunks, self.chunk_len)

  @property
  def mask(self) -> jax.Array:
    """Chunk-domain float32 array: 1 on slots that hold a weight, 0 on padding.

    Computed from iotas (stored slot -> natural position in the chunk, see
    ``_makhoul_order``), so inside ``jit`` it fuses into its consumer
    instead of being read from memory.
    """
    chunk, pos = _domain_positions(self.domain_shape, self.method == "factored", jnp)
    natural = jnp.where(pos < (self.chunk_len + 1) // 2, 2 * pos,
                        2 * (self.chunk_len - 1 - pos) + 1)
    size = self.num_params // self.chunks + (chunk < self.num_params % self.chunks)
    return _holds_weight(natural, size, self.chunk_len, jnp).astype(jnp.float32)

  @property
  def _bins(self) -> np.ndarray:
    k = np.arange(self.coeffs)
    return np.where(k <= self.chunk_len // 2, k, self.chunk_len - k)

  def to_chunks(self, x: jax.Array) -> jax.Array:
    """(n,) -> chunk domain: shuffle, chunk and zero-pad (stored order)."""
    x_pad = jnp.concatenate([x, jnp.zeros((1,), x.dtype)])
    return x_pad[self.gather].reshape(self.domain_shape)

  def from_chunks(self, chunks: jax.Array) -> jax.Array:
    """Chunk domain -> (n,): the inverse of :meth:`to_chunks` (padding dropped)."""
    return chunks.reshape(-1)[self.scatter]

  def forward(self, chunks: jax.Array) -> jax.Array:
    """Chunk domain -> (P, mc): first mc orthonormal DCT-II coefficients per chunk."""
    if self.method == "matmul":
      return jnp.dot(chunks, self.rows.T, precision=_HIGHEST)
    if self.method == "factored":
      num_res = self.stage2.shape[0] // 2
      u = jnp.dot(self.stage1, chunks.reshape(self.factor, -1), precision=_HIGHEST)
      # One batched matmul over (re/im, r): no slicing copies of the big u.
      parts = jnp.matmul(u.reshape(2 * num_res, self.chunks, -1), self.stage2,
                         precision=_HIGHEST)  # (2R, P, T), small
      slots = jnp.swapaxes(parts[:num_res] + parts[num_res:], 0, 1).reshape(self.chunks, -1)
      return jnp.take(slots, self.coef_slot, axis=1)
    spec = jnp.fft.rfft(chunks, axis=-1)
    if self.coeffs <= self.chunk_len // 2 + 1:
      spec = spec[:, :self.coeffs]
    else:
      spec = spec[:, self._bins]
    return jnp.real(spec) * self.coef_re + jnp.imag(spec) * self.coef_im

  def adjoint(self, coeffs: jax.Array) -> jax.Array:
    """(P, mc) -> chunk domain: the transpose of :meth:`forward`.

    FFT path: the transpose of ``v -> Re(c_k V_k)`` is ``j -> Re(sum_k c_k R_k
    e^{+2 pi i j k / L})``, an unnormalised inverse DFT of a half spectrum;
    ``irfft(norm="forward")`` computes it once the bins strictly between 0
    and L/2 are halved (folded into ``adj_re``/``adj_im``).
    """
    if self.method == "matmul":
      return jnp.dot(coeffs, self.rows, precision=_HIGHEST)
    if self.method == "factored":
      num_res, width = self.stage2.shape[0] // 2, self.stage2.shape[2]
      padded = jnp.concatenate([coeffs, jnp.zeros((self.chunks, 1), coeffs.dtype)], axis=1)
      slots = jnp.take(padded, self.slot_coef, axis=1)  # (P, R * T); unused slots 0
      slots = jnp.swapaxes(slots.reshape(self.chunks, num_res, width), 0, 1)
      slots = jnp.concatenate([slots, slots])  # (2R, P, T): re and im parts
      u = jnp.matmul(slots, jnp.swapaxes(self.stage2, 1, 2), precision=_HIGHEST)
      out = jnp.dot(self.stage1.T, u.reshape(2 * num_res, -1), precision=_HIGHEST)
      return out.reshape(self.domain_shape)
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
                  method: str = "auto", pad_to_fast_length: bool = True,
                  factor: int | None = None) -> ChunkedDCT:
  """Builds the FL-CS operator from the shared seed (thesis Sec. 4.1.4).

  Args:
    key: The shared key every party derives the permutation from.
    num_params: n.
    ratio: r; m = P * round(r n / P) values are kept.
    chunks: P (the thesis uses 200).
    method: "factored", "fft", "matmul", or "auto" (the cheapest: see
      ``_auto_method``).
    pad_to_fast_length: Pad chunks to a 7-smooth length (fast FFT); False
      keeps L = ceil(n / P).
    factor: Q for "factored" (a divisor of L); default: the one of least
      flops (:func:`choose_factor`).

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
    method = _auto_method(chunk_len, mc)
  if method != "factored":
    factor = 1
  elif factor is None:
    factor = choose_factor(chunk_len, mc)
  elif factor < 1 or chunk_len % factor:
    raise ValueError(f"factor Q = {factor} must divide the chunk length L = {chunk_len}")
  if method == "factored":
    shape = (factor, chunks, chunk_len // factor)
  else:
    shape = (chunks, chunk_len)

  perm = np.asarray(jax.random.permutation(key, num_params)).astype(np.int64)
  sizes = num_params // chunks + (np.arange(chunks) < num_params % chunks)
  order = _makhoul_order(chunk_len)  # Makhoul position j <- natural position order[j]
  gather, scatter = _layout(perm, sizes, order, shape, chunk_len, method == "factored")

  k = np.arange(mc)
  scale = np.where(k == 0, np.sqrt(1.0 / chunk_len), np.sqrt(2.0 / chunk_len))
  phase = -np.pi * k / (2 * chunk_len)  # X_k = scale * Re(e^{i phase} V_k)
  upper = k > chunk_len // 2  # V_k = conj(V_{L-k}) there
  coef_re = scale * np.cos(phase)
  coef_im = np.where(upper, 1.0, -1.0) * scale * np.sin(phase)
  bins = np.where(upper, chunk_len - k, k)
  halve = (bins > 0) & (2 * bins != chunk_len)
  adj_scale = np.where(halve, 0.5, 1.0)
  rows = _dct_rows(chunk_len, mc)[:, order] if method == "matmul" else np.zeros((0, 1))
  if method == "factored":
    stage1, stage2, coef_slot, slot_coef = _factored_weights(
        chunk_len, mc, factor, scale * np.exp(1j * phase))
  else:
    stage1, stage2 = np.zeros((0, 1)), np.zeros((0, 1, 1))
    coef_slot, slot_coef = np.zeros((0,)), np.zeros((0,))
  f32 = lambda a: jnp.asarray(a, jnp.float32)
  i32 = lambda a: jnp.asarray(a, jnp.int32)
  return ChunkedDCT(
      gather=i32(gather.reshape(-1)), scatter=i32(scatter),
      coef_re=f32(coef_re), coef_im=f32(coef_im),
      adj_re=f32(coef_re * adj_scale), adj_im=f32(coef_im * adj_scale), rows=f32(rows),
      stage1=f32(stage1), stage2=f32(stage2),
      coef_slot=i32(coef_slot), slot_coef=i32(slot_coef),
      num_params=num_params, chunks=chunks, chunk_len=chunk_len, coeffs=mc,
      method=method, factor=factor)


def _layout(perm: np.ndarray, sizes: np.ndarray, order: np.ndarray, shape: tuple[int, ...],
            chunk_len: int, factored: bool) -> tuple[np.ndarray, np.ndarray]:
  """(gather, scatter) of :class:`ChunkedDCT`: which weight each chunk-domain
  slot holds (n for padding) and the slot of each weight.

  Chunk p takes the next ``sizes[p]`` weights of the permutation, in natural
  order at the positions ``_holds_weight`` leaves to weights; ``order``
  maps stored (Makhoul) positions to natural ones.
  """
  num_params = perm.size
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  chunk_of, pos = _domain_positions(shape, factored, np)
  natural = order[pos]
  real = _holds_weight(natural, sizes[chunk_of], chunk_len, np)
  # rank[p, j]: how many weights chunk p holds before natural position j.
  holds = _holds_weight(np.arange(chunk_len)[None, :], sizes[:, None], chunk_len, np)
  rank = np.cumsum(holds, axis=1) - holds
  src = np.where(real, starts[chunk_of] + rank[chunk_of, natural], 0)
  gather = np.where(real, perm[src], num_params)
  scatter = np.empty(num_params, np.int64)
  scatter[gather[real]] = np.arange(gather.size).reshape(shape)[real]
  return gather, scatter


def _factored_weights(chunk_len: int, coeffs: int, q: int, rotation: np.ndarray):
  """Constants of the ``"factored"`` path (see the module docstring).

  Args:
    chunk_len: L.
    coeffs: mc.
    q: Q, a divisor of L.
    rotation: (mc,) complex ``scale_k e^{i phase_k}``: X_k = Re(rotation_k V_k).

  Returns:
    ``(stage1, stage2, coef_slot, slot_coef)`` as documented on
    :class:`ChunkedDCT`.
  """
  sub_len, num_res = chunk_len // q, q // 2 + 1
  r, j = np.arange(num_res)[:, None], np.arange(q)[None, :]
  angle = 2 * np.pi * r * j / q
  stage1 = np.concatenate([np.cos(angle), -np.sin(angle)])  # U = sum_q v e^{-i angle}
  k = np.arange(coeffs)
  res = k % q
  conj = res > q // 2  # U[Q - r] = conj(U[r]) for real input
  pair = np.where(conj, q - res, res)
  rank = np.zeros(coeffs, np.int64)  # position of k within its residue pair
  for p in range(num_res):
    members = np.flatnonzero(pair == p)
    rank[members] = np.arange(members.size)
  width = _stage2_width(q, coeffs)
  # G[l, k] = rotation_k e^{-2 pi i l k / L}; X_k = Re(sum_l G[l, k] U_l[k mod Q]).
  twiddle = rotation[None, :] * np.exp(-2j * np.pi * np.arange(sub_len)[:, None] * k / chunk_len)
  stage2 = np.zeros((2 * num_res, sub_len, width))
  stage2[pair, :, rank] = twiddle.real.T
  # Re(G U) = Re G Re U - Im G Im U; with conj(U), + Im G Im U.
  stage2[num_res + pair, :, rank] = np.where(conj[:, None], 1.0, -1.0) * twiddle.imag.T
  coef_slot = pair * width + rank
  slot_coef = np.full(num_res * width, coeffs)
  slot_coef[coef_slot] = k
  return stage1, stage2, coef_slot, slot_coef
