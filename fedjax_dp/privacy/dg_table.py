"""Fast discrete Gaussian sampling at fixed scales from exact alias tables.

FL-SIGN-DP (thesis Sec. 5.2, Alg. 9) has every client add ``DG(0, xi)`` to
an integer vector, with one scale xi per cohort size (``sqrt(n) sigma /
sqrt(|K| - l)``, thesis 5.2.5) and integer means. For a fixed scale the
rejection sampler of :mod:`fedjax_dp.privacy.discrete_gaussian` is more
general than needed: lattice cryptography samples such distributions from
a precomputed table, one uniform draw and a lookup per sample. This module
builds Walker alias tables (Walker 1977; Vose 1991) in exact integer
arithmetic once per run and samples from them inside the jitted round.

Table (built in numpy, :func:`discrete_gaussian_table`):

* Support ``[-T, T]`` with T the smallest integer for which a bound on the
  two tails' DG mass is below ``2^-128`` (about 13.3 xi, within 2 of the
  true smallest); K = 2^k slots, ``K >= 2T + 2``, slot i stands for the
  integer ``i - K/2``.
* Probabilities in units of ``2^-128``: the Gaussian function
  ``g(x) = exp(-x^2 / (2 xi^2))`` is evaluated in numpy ``longdouble``,
  converted exactly to integers and normalised in integer arithmetic, so the
  integer weights W_x sum to exactly ``2^128`` and
  ``|W_x 2^-128 - g(x) / sum g| < 2^-127``.
* The alias table in exact integers (the "sweep" construction of
  Huebschle-Schneider and Sanders 2022, vectorised with prefix sums): slot i
  keeps its own integer with probability ``t_i / 2^(128-k)`` and otherwise
  yields ``alias_i``, so that integer x has probability exactly
  ``2^-128 (t_x + sum_{i: alias_i = x} (2^(128-k) - t_i)) = W_x 2^-128``.

Sampling (:func:`sample_table`): a 128-bit uniform u; its top k bits pick
the slot, the other ``128 - k`` bits v are compared with t_i (keep iff
``v < t_i``). One 32-bit word decides the comparison unless v and t_i agree
on their first ``32 - k`` bits (probability ``2^-(32-k)``, 2^-19 for the
paper CNN's K = 2^13); those few elements draw three more words in a short
loop and compare the remaining 96 bits. So a sample costs about one random
word, one table lookup (one uint32) and a few integer operations, and the
comparison is exact to the table's last bit.

What the result is, exactly. Sampling reproduces the weights W exactly (the
threefry words are taken as uniform). Against the true ``DG(mu, xi)``:

* every integer x with ``|x - mu| <= T`` has probability
  ``p(x) (1 + rho_x) + e_x`` with ``|e_x| < 2^-127`` and ``|rho_x|`` below
  :data:`PMF_RELATIVE_ERROR` (``longdouble``'s evaluation of
  ``x^2 / (2 xi^2)``, up to ~90, and of exp: about 2^-54 with x86-64's 80-bit
  long double, about 2^-43 where long double is float64), and
* the integers beyond T (mass below 2^-128) are never sampled.

For DP (docs/privacy.md): the relative part multiplies every output
probability of a round's noisy sum by at most ``(1 + rho)^(n |K|)``, which
moves epsilon by at most ``2 n |K| T_cl rho`` over a run (3e-6 for the paper
CNN's 200 rounds of 100 clients); the additive part is a total variation
distance below ``(2T + 2) 2^-127`` per sample (2^-115 at xi = 199), which a
run's 3.3e10 samples add to delta as less than 1e-24.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

# Bits of the fixed-point probabilities (units of 2^-BITS).
BITS = 128
_TAIL_LOG2 = -128.0  # the cut tails' DG mass is below 2^_TAIL_LOG2
_MAX_LOG2_SLOTS = 24  # at least 8 bits of a word stay for the threshold
CHUNK = 1 << 15  # elements a scan step samples (see sample_table)

# Relative error of the Gaussian function's evaluation: x^2 is exact,
# 1/(2 xi^2) is rounded up to 3 times and the product once (relative 4 eps
# of an argument up to ~90: 360 eps absolute), then exp (2 eps).
PMF_RELATIVE_ERROR = 400.0 * float(np.finfo(np.longdouble).eps)


@dataclasses.dataclass(frozen=True, eq=False)
class DiscreteGaussianTable:
  """Alias tables of ``DG(0, xi)`` for a few fixed scales (one row each).

  Compared by identity, so a scheme holding one stays hashable. Build with
  :func:`discrete_gaussian_table`; sample with :func:`sample_table`.

  Attributes:
    scales: xi of each row.
    log2_slots: k; every row has K = 2^k slots, slot i meaning ``i - K/2``.
    tails: T of each row (support ``[-T, T]``).
    primary: (rows, K) uint32: the threshold's top 32 - k bits, shifted
      left by k, or'ed with the alias slot.
    refine: (rows, K, 3) uint32: the threshold's other 96 bits, high first.
  """

  scales: tuple[float, ...]
  log2_slots: int
  tails: tuple[int, ...]
  primary: np.ndarray
  refine: np.ndarray

  @property
  def slots(self) -> int:
    """K."""
    return 1 << self.log2_slots

  @property
  def rows(self) -> int:
    """The number of scales."""
    return len(self.scales)

  def nbytes(self) -> int:
    """Memory of the tables."""
    return int(self.primary.nbytes + self.refine.nbytes)


def tail_cut(scale: float) -> int:
  """The smallest T whose bound on ``P(|X| > T)`` is below ``2^-128``, X ~ DG(0, xi).

  Bound: ``sum_{x > T} g(x) <= g(T + 1) / (1 - exp(-(T + 1) / xi^2))`` for
  ``g(x) = exp(-x^2 / (2 xi^2))``, and ``Z = sum_x g(x) >= max(1, sqrt(2 pi)
  xi - 1)`` (comparison with the Gaussian integral). Bisection: the bound
  decreases with T.
  """
  xi = float(scale)
  log_z = math.log(max(1.0, math.sqrt(2 * math.pi) * xi - 1.0))
  limit = _TAIL_LOG2 * math.log(2.0)

  def small_enough(t):
    a = (t + 1) / (xi * xi)
    return (math.log(2.0) - (t + 1) ** 2 / (2 * xi * xi)
            - math.log(-math.expm1(-a)) - log_z) < limit

  lo, hi = -1, int(math.sqrt(-2.0 * limit) * xi) + 10  # small_enough(hi) holds
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (lo, mid) if small_enough(mid) else (mid, hi)
  return max(hi, 0)


def _weights(scale: float, tail: int, slots: int) -> np.ndarray:
  """(K,) integer weights (object array) summing to exactly 2^BITS.

  Slot ``x + K/2`` holds x's weight for ``|x| <= tail``, the rest 0. Each
  weight is within 2 units of ``2^BITS g(x) / sum g`` (g evaluated in
  longdouble and then used exactly).
  """
  x = np.arange(-tail, tail + 1)
  inv = np.longdouble(1) / (np.longdouble(2) * np.longdouble(scale) ** 2)
  g = np.exp(-np.square(x.astype(np.longdouble)) * inv)
  # g = m 2^e exactly with m in [0.5, 1) of at most 64 bits: U = m 2^64 2^(e - min e).
  mant, expo = np.frexp(g)
  hi = np.floor(np.ldexp(mant, 32))
  lo = np.ldexp(mant, 64) - np.ldexp(hi, 32)  # exact: the mantissa's low bits
  m64 = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
  unnorm = m64.astype(object) << (expo - expo.min()).astype(object)
  total = int(np.sum(unnorm))
  # W = floor(U r / 2^s), r = floor(2^(BITS + s) / total): each W is below
  # its exact share by less than 1 + U / 2^s, so at most len(x) units short.
  s = total.bit_length() + len(x).bit_length() + 1
  w = (unnorm * ((1 << (BITS + s)) // total)) >> s
  short = (1 << BITS) - int(np.sum(w))
  w[np.argsort(np.abs(x), kind="stable")[:short]] += 1  # the largest weights
  out = np.zeros(slots, dtype=object)
  out[slots // 2 - tail: slots // 2 + tail + 1] = w
  return out


def _searchsorted(a: np.ndarray, v: np.ndarray, side: str) -> np.ndarray:
  """``np.searchsorted`` of sorted object-int arrays, exact and fast.

  Positions come from float64 copies, then are moved until the exact
  conditions hold (only values within float64 rounding of each other move).
  """
  af, vf = a.astype(np.float64), v.astype(np.float64)
  pos = np.searchsorted(af, vf, side=side)
  n = len(a)
  # side "left": a[pos - 1] < v <= a[pos]; "right": a[pos - 1] <= v < a[pos].
  below = (lambda x, y: x < y) if side == "left" else (lambda x, y: x <= y)
  while True:
    low = pos > 0
    bad_low = np.zeros(len(v), bool)
    bad_low[low] = ~below(a[pos[low] - 1], v[low]).astype(bool)
    high = pos < n
    bad_high = np.zeros(len(v), bool)
    bad_high[high] = below(a[pos[high]], v[high]).astype(bool)
    if not (bad_low.any() or bad_high.any()):
      return pos
    pos = pos - bad_low + bad_high


def _alias(w: np.ndarray, unit: int) -> tuple[np.ndarray, np.ndarray]:
  """Exact alias table of integer weights ``w`` (sum ``len(w) * unit``).

  The sweep: lights (``w < unit``) in index order take their missing mass
  from the current heavy; a heavy whose residual falls below ``unit``
  becomes light and takes from the next heavy. With D the prefix sums of
  the lights' deficits and E of the heavies' excesses, light i's heavy is
  the first j with ``E_j >= D_{i-1}``, and heavy j turns light at the first
  light i with ``D_i > E_j``, keeping ``unit + E_j - D_i`` and aliasing to
  heavy j + 1.

  Returns:
    ``(threshold, alias)``: thresholds in ``[0, unit)`` (object ints; a full
    slot aliases to itself) and int64 alias slots.
  """
  n = len(w)
  light = (w < unit).astype(bool)
  lights, heavies = np.nonzero(light)[0], np.nonzero(~light)[0]
  threshold = np.empty(n, dtype=object)
  alias = np.arange(n, dtype=np.int64)
  if lights.size:
    deficit = np.cumsum(unit - w[lights])
    excess = np.cumsum(w[heavies] - unit)
    before = np.concatenate([np.array([0], dtype=object), deficit[:-1]])
    alias[lights] = heavies[_searchsorted(excess, before, "left")]
    threshold[lights] = w[lights]
    turn = _searchsorted(deficit, excess, "right")  # first i with D_i > E_j
    turns = turn < lights.size
    j = np.nonzero(turns)[0]
    threshold[heavies[j]] = unit + excess[j] - deficit[turn[j]]
    alias[heavies[j]] = heavies[j + 1]
    full = heavies[~turns]
  else:
    full = heavies
  threshold[full] = unit - 1  # aliases to itself: the comparison is moot
  return threshold, alias


def discrete_gaussian_table(scales: Sequence[float] | float) -> DiscreteGaussianTable:
  """Builds the alias tables of ``DG(0, xi)`` for every xi in ``scales``.

  Exact integer arithmetic in numpy (see the module docstring); about a
  second per million slots. Rows share K, set by the largest scale.

  Args:
    scales: xi > 0 (one row each), each at most ~6e5 (K <= 2^24).

  Returns:
    The tables.

  Raises:
    ValueError: A scale is not positive or too large.
  """
  scales = tuple(float(s) for s in np.atleast_1d(np.asarray(scales, np.float64)))
  if not scales or not all(s > 0 and math.isfinite(s) for s in scales):
    raise ValueError(f"scales must be positive, got {scales}")
  tails = tuple(tail_cut(s) for s in scales)
  log2_slots = max(1, math.ceil(math.log2(2 * max(tails) + 2)))
  if log2_slots > _MAX_LOG2_SLOTS:
    raise ValueError(f"scale {max(scales):g} needs 2^{log2_slots} table slots; "
                     f"at most 2^{_MAX_LOG2_SLOTS} (scale <= ~6e5)")
  slots = 1 << log2_slots
  unit = 1 << (BITS - log2_slots)
  primary = np.empty((len(scales), slots), np.uint32)
  refine = np.empty((len(scales), slots, 3), np.uint32)
  for row, (scale, tail) in enumerate(zip(scales, tails)):
    threshold, alias = _alias(_weights(scale, tail, slots), unit)
    # threshold < 2^(128 - k): its top 32 - k bits, then three 32-bit words.
    top = (threshold >> 96).astype(np.uint64)
    primary[row] = ((top << np.uint64(log2_slots)) | alias.astype(np.uint64)).astype(np.uint32)
    for word in range(3):
      refine[row, :, word] = ((threshold >> (64 - 32 * word)) & 0xFFFFFFFF).astype(np.uint32)
  return DiscreteGaussianTable(scales, log2_slots, tails, primary, refine)


def table_pmf(table: DiscreteGaussianTable, row: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """What row ``row`` samples: (integers, probabilities as exact fractions of 2^128).

  Recomputed from the packed table (thresholds and aliases), so it checks
  the packing as well as the construction.

  Returns:
    ``(support, weights)``: int64 integers and their object-int weights in
    units of 2^-128 (summing to 2^128).
  """
  k, slots = table.log2_slots, table.slots
  alias = (table.primary[row] & np.uint32(slots - 1)).astype(np.int64)
  threshold = (table.primary[row] >> np.uint32(k)).astype(object)
  for word in range(3):
    threshold = (threshold << 32) | table.refine[row, :, word].astype(object)
  unit = 1 << (BITS - k)
  own = np.where(alias == np.arange(slots), unit, threshold)  # full slots keep all
  weights = own.copy()
  for i in np.nonzero(alias != np.arange(slots))[0]:
    weights[alias[i]] += unit - own[i]
  return np.arange(slots, dtype=np.int64) - slots // 2, weights


def sample_table(key: jax.Array, table: DiscreteGaussianTable, shape: tuple[int, ...],
                 row: jax.Array | int = 0) -> jax.Array:
  """Samples ``DG(0, table.scales[row])`` from the alias table.

  Add an integer mean to the result for ``DG(mean, xi)``. Jittable
  (``shape`` static, ``row`` traced) and vmappable. The words are drawn for
  the whole vector first and the lookups run in a scan over chunks: XLA
  would otherwise fuse the threefry hash into the lookups' loop, which it
  does not vectorise (slower on this project's CPU: docs/performance.md,
  "Figures behind the code's choices").

  Args:
    key: PRNG key, used for nothing else.
    table: From :func:`discrete_gaussian_table` (constants of the program).
    shape: Output shape.
    row: Which scale (clipped to the table's rows).

  Returns:
    int32 samples of ``shape``.
  """
  shape = tuple(int(d) for d in shape)
  size = int(np.prod(shape, dtype=np.int64))
  if size == 0:
    return jnp.zeros(shape, jnp.int32)
  k, slots = table.log2_slots, table.slots
  low_mask = jnp.uint32((1 << (32 - k)) - 1)
  alias_mask = jnp.uint32(slots - 1)
  primary = jnp.asarray(table.primary.reshape(-1))
  refine = jnp.asarray(table.refine.reshape(-1, 3))
  base = jnp.clip(jnp.asarray(row, jnp.int32), 0, table.rows - 1) * slots
  num_chunks = -(-size // CHUNK)
  chunk = -(-size // num_chunks)
  draw_key, refine_key = jax.random.split(key)
  words = jax.random.bits(draw_key, (num_chunks, chunk), jnp.uint32)

  def refine_first(carry):
    """Decides the chunk's first tied slot with 96 more bits."""
    slot, tie, chunk_key, trip = carry
    i = jnp.argmax(tie)
    where = base + slot[i]
    r = jax.random.bits(jax.random.fold_in(chunk_key, trip), (3,), jnp.uint32)
    t = refine[where]
    keep = (r[0] < t[0]) | ((r[0] == t[0]) & (
        (r[1] < t[1]) | ((r[1] == t[1]) & (r[2] < t[2]))))
    alias = (primary[where] & alias_mask).astype(jnp.int32)
    return (slot.at[i].set(jnp.where(keep, slot[i], alias)), tie.at[i].set(False),
            chunk_key, trip + 1)

  def lookup(_, xs):
    w, c = xs
    slot = (w >> (32 - k)).astype(jnp.int32)
    entry = primary[base + slot]
    v, t = w & low_mask, entry >> k
    alias = (entry & alias_mask).astype(jnp.int32)
    tie = v == t  # undecided on 32 - k bits: about 2^-(32 - k) of the elements
    slot = jnp.where(v <= t, slot, alias)
    slot = jax.lax.while_loop(lambda c: jnp.any(c[1]), refine_first,
                              (slot, tie, jax.random.fold_in(refine_key, c),
                               jnp.int32(0)))[0]
    return None, slot - slots // 2

  _, value = jax.lax.scan(lookup, None, (words, jnp.arange(num_chunks)))
  return value.reshape(-1)[:size].reshape(shape)


@functools.lru_cache(maxsize=16)
def _host_table(scale: float) -> DiscreteGaussianTable:
  return discrete_gaussian_table(scale)


def _host_sample(key: np.ndarray, scale: float, size: int) -> np.ndarray:
  """``DG(0, scale)`` in numpy: the alias table's map of numpy's uniform words."""
  table = _host_table(scale)
  k, slots = table.log2_slots, table.slots
  rng = np.random.default_rng(np.asarray(key, np.uint32).ravel().tolist())
  words = rng.integers(0, 1 << 32, size, dtype=np.uint64)
  slot = (words >> np.uint64(32 - k)).astype(np.int64)
  entry = table.primary[0][slot].astype(np.uint64)
  v, t = words & np.uint64((1 << (32 - k)) - 1), entry >> np.uint64(k)
  alias = (entry & np.uint64(slots - 1)).astype(np.int64)
  out = np.where(v <= t, slot, alias)
  for i in np.nonzero(v == t)[0]:  # decide on the other 96 bits
    rest = [int(x) for x in rng.integers(0, 1 << 32, 3, dtype=np.uint64)]
    if not rest < [int(x) for x in table.refine[0, slot[i]]]:
      out[i] = alias[i]
  return (out - slots // 2).astype(np.int32)


def sample_on_host(key: jax.Array, scale: Callable[[np.ndarray], float],
                   shape: tuple[int, ...], arg: jax.Array) -> jax.Array:
  """``DG(0, scale(arg))`` drawn on the host, for scales a program has no table for.

  A ``jax.pure_callback``: costs nothing to compile and builds (and caches)
  the scale's table when called, so a jitted round can cover rare scales
  exactly without compiling the rejection sampler. The draw is the alias
  table's map of numpy's PCG64 words seeded by ``key``, so the same key gives
  the same draw.

  Args:
    key: PRNG key (uint32[2]), used for nothing else.
    scale: Maps the concrete ``arg`` to xi (in float64 on the host).
    shape: Output shape.
    arg: What the scale is a function of (e.g. a share count), traced.

  Returns:
    int32 samples of ``shape``.
  """
  size = int(np.prod(shape, dtype=np.int64))

  def host(key, arg):
    return _host_sample(key, float(scale(np.asarray(arg))), size).reshape(shape)

  return jax.pure_callback(host, jax.ShapeDtypeStruct(shape, jnp.int32), key, arg,
                           vmap_method="sequential")
