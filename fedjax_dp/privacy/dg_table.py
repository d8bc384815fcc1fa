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
paper CNN's K = 2^13); those few elements are ties, and draw three more
words and compare the remaining 96 bits. So a sample costs about one random
word, one table lookup (one uint32) and a few integer operations, and the
comparison is exact to the table's last bit.

All of it is device code, in two steps (thesis Alg. 9's shares drawn for a
whole cohort chunk at once, issue 47):

* :func:`draw_marked`: element j's first word is word j of
  ``bits(split(key)[0])`` (laid out in chunks of :data:`CHUNK`); the
  lookups are branch-free, and a tie is left marked (``TIE_MARK + i``, below
  every sample) and counted per chunk. On a CPU the lookups run in a scan
  over the chunks, elsewhere as one fusion (same values).
* :func:`resolve_ties`: the ties of many vectors (a cohort chunk's shares)
  in one ``lax.while_loop``, which visits up to ``max_ties`` chunks holding
  ties per iteration (compacted from the small per-chunk counts) and
  decides the first tie of each. Tie j of the vector drawn with ``key`` takes
  its 96 bits from ``bits(fold_in(split(key)[1], j))``: a key per element,
  used once, so the sample is a fixed map of the key's bits whatever the
  order, the platform or ``max_ties``.

No loop runs per element, chunk or client, so a GPU synchronises with the
host a few times per call, not once per chunk (the loop's predicate).

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
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

# Bits of the fixed-point probabilities (units of 2^-BITS).
BITS = 128
_TAIL_LOG2 = -128.0  # the cut tails' DG mass is below 2^_TAIL_LOG2
_MAX_LOG2_SLOTS = 24  # at least 8 bits of a word stay for the threshold
CHUNK = 1 << 15  # elements a scan step samples (see draw_marked)
# A tie still to decide is TIE_MARK + slot: below every sample (|x| <= 2^23 + 1).
TIE_MARK = -(1 << 31)
_MARKED_BELOW = TIE_MARK + (1 << _MAX_LOG2_SLOTS)
_MAX_VISIT = 1 << 24  # elements an iteration of resolve_ties reads at most

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


def num_chunks(size: int) -> tuple[int, int]:
  """``(chunks, chunk)``: how :func:`draw_marked` lays out a vector's words.

  ``chunks * chunk >= size`` words of at most :data:`CHUNK` each; the
  layout fixes which threefry word each element gets.
  """
  chunks = max(1, -(-size // CHUNK))
  return chunks, -(-size // chunks)


def is_marked(values: jax.Array) -> jax.Array:
  """Whether each value of :func:`draw_marked` is a tie still to decide."""
  return values < jnp.int32(_MARKED_BELOW)


def _lookup(words, offset, primary, base, k, slots, decide):
  """Branch-free table lookups of 32-bit words (thesis Alg. 9's noise, Walker's alias map).

  The top k bits pick slot i, the next ``decide`` bits v are compared with
  the threshold's top ``decide`` bits t: keep i if ``v < t``, take
  ``alias_i`` if ``v > t``; on ``v == t`` the element is a tie, returned as
  ``TIE_MARK + i``. Decided elements get ``offset`` added.
  """
  slot = (words >> (32 - k)).astype(jnp.int32)
  entry = primary[base + slot]
  shift = 32 - k - decide
  v = (words & jnp.uint32((1 << (32 - k)) - 1)) >> shift
  t = (entry >> k) >> shift
  alias = (entry & jnp.uint32(slots - 1)).astype(jnp.int32)
  value = jnp.where(v < t, slot, alias) + (offset.astype(jnp.int32) - slots // 2)
  return jnp.where(v == t, jnp.int32(TIE_MARK) + slot, value)


def draw_marked(key: jax.Array, table: DiscreteGaussianTable, size: int,
                row: jax.Array | int = 0, offset: jax.Array | int = 0,
                decide_bits: int | None = None, scan: bool | None = None
                ) -> tuple[jax.Array, jax.Array]:
  """The first-word part of :func:`sample_table`: values, with ties marked.

  One threefry word per element from ``split(key)[0]``, laid out as
  ``(chunks, chunk)`` (:func:`num_chunks`). Branch-free: no loop depends
  on the data. Finish with :func:`resolve_ties`, whose words come from
  ``split(key)[1]``.

  Args:
    key: PRNG key, used for nothing else.
    table: The tables (constants of the program).
    size: Elements (static).
    row: Which scale (clipped to the table's rows).
    offset: Added to every decided element: (size,) or a scalar (an integer
      mean, e.g. FL-SIGN-DP's sign).
    decide_bits: Tests only: threshold bits the first word decides on,
      default (and at most) ``32 - k``; fewer make ties frequent without
      changing the distribution (:func:`resolve_ties` draws the rest).
    scan: Look the words up in a ``lax.scan`` over the chunks (the CPU's
      way: otherwise XLA:CPU fuses the threefry hash into the lookups' loop,
      which it does not vectorise; docs/performance.md), or all at once (a
      GPU's way: one fusion, no loop); default: by the platform the program
      is lowered for. The values are the same.

  Returns:
    ``(values, ties)``: (size,) int32, ``TIE_MARK + slot`` where the element
    is a tie (:func:`is_marked`), and (chunks,) int32 the ties of each chunk.
  """
  k, slots = table.log2_slots, table.slots
  decide = 32 - k if decide_bits is None else int(decide_bits)
  if not 0 <= decide <= 32 - k:
    raise ValueError(f"decide_bits must be in [0, {32 - k}], got {decide_bits}")
  primary = jnp.asarray(table.primary.reshape(-1))
  base = jnp.clip(jnp.asarray(row, jnp.int32), 0, table.rows - 1) * slots
  chunks, chunk = num_chunks(size)
  words = jax.random.bits(jax.random.split(key)[0], (chunks, chunk), jnp.uint32)
  offset = jnp.asarray(offset)
  lookup = lambda w, o: _lookup(w, o, primary, base, k, slots, decide)
  # The last chunk's padding words (beyond size) are not counted.
  inside = lambda c: c * chunk + jnp.arange(chunk) < size

  def at_once(words, offset):
    values = lookup(words.reshape(-1)[:size], offset)
    marked = jnp.pad(is_marked(values), (0, chunks * chunk - size)).reshape(chunks, chunk)
    return values, jnp.sum(marked, axis=1, dtype=jnp.int32)

  def scanned(words, offset):
    if offset.ndim:  # (size,): chunked like the words
      offset = jnp.pad(offset, (0, chunks * chunk - size)).reshape(chunks, chunk)
    else:
      offset = jnp.broadcast_to(offset, (chunks, 1))

    def step(_, xs):
      w, o, c = xs
      values = lookup(w, o)
      return None, (values, jnp.sum(is_marked(values) & inside(c), dtype=jnp.int32))

    values, ties = jax.lax.scan(step, None, (words, offset, jnp.arange(chunks)))[1]
    return values.reshape(-1)[:size], ties

  if scan is None:
    return jax.lax.platform_dependent(words, offset, cpu=scanned, default=at_once)
  return (scanned if scan else at_once)(words, offset)


def default_max_ties(table: DiscreteGaussianTable, size: int) -> int:
  """Chunks with ties :func:`resolve_ties` visits per iteration, for ``size`` elements.

  A power of two above twice the expected number of ties,
  ``size 2^-(32-k)``, plus 64, so one iteration almost always decides all;
  at most the number of chunks.
  """
  expected = size * 2.0 ** -(32 - table.log2_slots)
  return int(1 << math.ceil(math.log2(2 * expected + 64)))


def resolve_ties(values: jax.Array, ties: jax.Array, keys: jax.Array,
                 table: DiscreteGaussianTable, row: jax.Array | int = 0,
                 offset: jax.Array | int = 0, decide_bits: int | None = None,
                 max_ties: int | None = None) -> jax.Array:
  """Decides the ties of :func:`draw_marked` on the threshold's other bits.

  Tie j of vector b (slot i) draws ``jax.random.bits(fold_in(split(keys[b])[1],
  j))``: 3 words (4 with fewer ``decide_bits``: the first word's unread bits
  come first), compared as one number with the rest of t_i; keep i iff
  below. A key per element, used once: the draw does not depend on the
  order in which ties are decided, nor on ``max_ties``.

  One ``lax.while_loop`` for all vectors. An iteration compacts up to
  ``max_ties`` chunks that still hold ties (``jnp.nonzero`` of the small
  (B, chunks) count array) and decides the first tie of each, so it reads
  ``max_ties`` chunks, never the whole of ``values``; it runs until no tie
  is left (once, almost always; as many times as one chunk has ties, and
  more when more than ``max_ties`` chunks hold ties).

  Args:
    values: (B, L) int32 from :func:`draw_marked` (row b drawn with keys[b]).
    ties: (B, chunks) int32 the ties per chunk (:func:`draw_marked`'s).
    keys: (B,) PRNG keys (uint32[B, 2]), the keys of the rows' draws.
    table, row, decide_bits: As for :func:`draw_marked`.
    offset: As for :func:`draw_marked`: a scalar or (B, L).
    max_ties: Chunks visited per iteration (static); default
      :func:`default_max_ties` of all B L elements.

  Returns:
    (B, L) int32 samples (plus offset).
  """
  k, slots = table.log2_slots, table.slots
  rest = 32 - k - (32 - k if decide_bits is None else int(decide_bits))
  num_rows, length = values.shape
  if num_rows * length == 0:
    return values
  chunks, chunk = num_chunks(length)
  blocks = num_rows * chunks
  m = default_max_ties(table, num_rows * length) if max_ties is None else int(max_ties)
  m = max(1, min(m, blocks, _MAX_VISIT // chunk))
  primary = jnp.asarray(table.primary.reshape(-1))
  refine = jnp.asarray(table.refine.reshape(-1, 3))
  base = jnp.clip(jnp.asarray(row, jnp.int32), 0, table.rows - 1) * slots
  offset = jnp.asarray(offset)
  refine_keys = jax.vmap(lambda key: jax.random.split(key)[1])(keys)

  def body(carry):
    values, ties = carry
    block = jnp.nonzero(ties.reshape(-1) > 0, size=m, fill_value=blocks)[0]
    b = jnp.minimum(block // chunks, num_rows - 1)
    c = block % chunks
    # The chunk's first tie (the last chunk's slice is clamped to end at L, so
    # elements before the chunk are masked).
    start = jnp.minimum(c * chunk, length - chunk)
    seg = jax.vmap(lambda b, s: jax.lax.dynamic_slice(values, (b, s), (1, chunk))[0])(b, start)
    pos = start[:, None] + jnp.arange(chunk)
    j = start + jnp.argmax(is_marked(seg) & (pos >= (c * chunk)[:, None]), axis=1)
    slot = values[b, j] - jnp.int32(TIE_MARK)
    where = base + slot
    r = jax.vmap(lambda key, j: jax.random.bits(jax.random.fold_in(key, j), (3 + (rest > 0),),
                                                jnp.uint32))(refine_keys[b], j)
    t = refine[where]
    # keep iff (r_0 .. r_2) < (t_0 .. t_2) as 96-bit numbers (high word first).
    keep = (r[:, -3] < t[:, 0]) | ((r[:, -3] == t[:, 0]) & (
        (r[:, -2] < t[:, 1]) | ((r[:, -2] == t[:, 1]) & (r[:, -1] < t[:, 2]))))
    if rest:  # first the first word's unread low bits against t's
      low = jnp.uint32((1 << rest) - 1)
      v, t0 = r[:, 0] & low, (primary[where] >> k) & low
      keep = (v < t0) | ((v == t0) & keep)
    alias = (primary[where] & jnp.uint32(slots - 1)).astype(jnp.int32)
    add = (offset[b, j] if offset.ndim else offset).astype(jnp.int32)
    decided = jnp.where(keep, slot, alias) + (add - slots // 2)
    real = block < blocks  # compaction's fill entries change nothing
    values = values.at[jnp.where(real, b, num_rows), j].set(decided, mode="drop")
    return values, ties.reshape(-1).at[block].add(-1, mode="drop").reshape(ties.shape)

  return jax.lax.while_loop(lambda c: jnp.any(c[1] > 0), body, (values, ties))[0]


def sample_table(key: jax.Array, table: DiscreteGaussianTable, shape: tuple[int, ...],
                 row: jax.Array | int = 0, decide_bits: int | None = None,
                 max_ties: int | None = None, scan: bool | None = None) -> jax.Array:
  """Samples ``DG(0, table.scales[row])`` from the alias table.

  Add an integer mean to the result for ``DG(mean, xi)``. Jittable
  (``shape`` static, ``row`` traced) and vmappable; device code only.
  :func:`draw_marked` then :func:`resolve_ties` (see there for the
  arguments and the module docstring for the map from bits to samples).

  Args:
    key: PRNG key, used for nothing else.
    table: From :func:`discrete_gaussian_table` (constants of the program).
    shape: Output shape.
    row: Which scale (clipped to the table's rows).
    decide_bits, max_ties, scan: Tests and platform choices (defaults: the
      platform's way).

  Returns:
    int32 samples of ``shape``.
  """
  shape = tuple(int(d) for d in shape)
  size = int(np.prod(shape, dtype=np.int64))
  if size == 0:
    return jnp.zeros(shape, jnp.int32)
  values, ties = draw_marked(key, table, size, row, decide_bits=decide_bits, scan=scan)
  values = resolve_ties(values[None], ties[None], key[None], table, row, decide_bits=decide_bits,
                        max_ties=max_ties)
  return values.reshape(shape)
