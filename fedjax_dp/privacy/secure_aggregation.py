"""Simulated secure aggregation: fixed-point encoding and pairwise masks mod 2^b.

UAI 2021 Sec. 3.2.2 and thesis Sec. 5.2.1: each client sends
``Enc_k(x_k) = x_k + K_k mod p`` with ``sum_k K_k = 0`` (Acs and Castelluccia
2011; Bonawitz et al. 2016), so the server learns the sum of the (noisy)
contributions and nothing else. This module simulates that protocol exactly:

* Encoding: a real contribution is encoded in fixed point,
  ``q = round(x * 2^f)`` (``scale = 2^f``; integers, e.g. FL-SIGN-DP's
  discrete Gaussian values, use scale 1), an int32 read modulo ``2^b``.
* Masks: for every edge (u, v) of a pairing graph the two clients derive the
  same stream ``PRG(s_uv)`` from a per-pair key ``s_uv`` (here
  ``fold_in(fold_in(key, min id), max id)``, the stand-in for the
  Diffie-Hellman agreed seed of Bonawitz et al.); u adds it and v subtracts
  it, modulo 2^b. Every masked vector ``y_k = q_k + mask_k mod 2^b`` is
  uniformly distributed on ``Z_{2^b}^m`` (a uniform stream added modulo 2^b),
  and the masks cancel in the modular sum of *all* sampled clients, so it
  equals the sum of the encodings exactly.
* Graph: the sampled clients, in cohort order, form a ring and each is
  paired with its d nearest successors (and so predecessors), ``2d`` masks
  per client. The cost is O(|K| d m) random words per round instead of
  O(|K|^2 m) for the complete graph of Bonawitz et al. 2016; Bell et al. 2020
  (CCS, "Secure single-server aggregation with (poly)logarithmic overhead")
  show that O(log |K|) random neighbours suffice against a bounded number of
  colluders. d = 1 (the default) already makes each masked vector uniform to
  anybody who lacks one of the client's two pairwise keys; the sum, and so
  every simulated result, does not depend on d.
* Failures: when a sampled client drops out after the masks are set, its
  pairwise masks no longer cancel; as in Bonawitz et al. the survivors
  reveal what is needed to rebuild the dropped client's pair seeds, and the
  server removes those masks (:func:`secure_sum` with ``present``).
* Modulus: thesis 5.2.4 (FL-SIGN-DP), ``m = 2^ceil(log2((12 sqrt(n) sigma +
  max|mu|) |K|))``; :func:`bit_width` applies it to any DP scheme with
  ``S sigma`` for ``sqrt(n) sigma`` and the fixed-point scale.
* Overflow: the decoded (two's complement) sum is correct iff the true
  integer sum lies in ``[-2^(b-1), 2^(b-1))``. The simulation also keeps an
  exact integer sum (two 16-bit limbs, no wrap-around) and counts every
  coordinate whose true sum is out of range or whose contribution could not
  be encoded; the count is reported, the sum is never silently wrapped.

All functions are pure and jittable; ``bits``, ``neighbours`` and shapes are
static.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

MAX_BITS = 31  # exact overflow check and int32 decoding
TAIL_FACTOR = 12  # thesis 5.2.4: |z - mu| < 12 sqrt(n) sigma except w.p. < 2^-80
# Largest float32 below 2^31: larger fixed-point values do not fit int32.
_ENCODABLE = 2147483520.0


def bit_width(noise_std: float, max_abs_value: float, num_clients: int,
              scale: float = 1.0, largest: int | None = None) -> int:
  """Bits per value of the secure sum, thesis 5.2.4.

  ``b = ceil(log2((12 * noise_std + max_abs_value) * |K| * scale))``, the
  thesis' modulus (22 bits for FL-SIGN-DP at epsilon 1 with the paper CNN and
  |K| = 100), and never less than what the noiseless sum of the largest
  cohort needs, ``ceil(log2(2 * max_abs_value * |K|max * scale + 1))`` (two's
  complement).

  Args:
    noise_std: Standard deviation of the aggregate noise: ``sqrt(n) sigma``
      for FL-SIGN-DP, ``S sigma`` for the Gaussian schemes, 0 without DP.
    max_abs_value: Largest |coordinate| of a noiseless contribution: 1 for
      signs, S for updates clipped to L2 norm S.
    num_clients: |K|, the number of summed contributions (the thesis' C N,
      the expected cohort).
    scale: Fixed-point scale ``2^f`` (1 for integers).
    largest: |K|max, the most contributions a round can sum (a Poisson
      cohort above its mean); default ``num_clients``.

  Returns:
    b.

  Raises:
    ValueError: If b exceeds :data:`MAX_BITS` (use fewer fractional bits).
  """
  largest = num_clients if largest is None else largest
  if noise_std < 0 or max_abs_value <= 0 or not 1 <= num_clients <= largest or scale <= 0:
    raise ValueError("bit_width needs noise_std >= 0, max_abs_value > 0, "
                     "1 <= num_clients <= largest and scale > 0")
  paper = (TAIL_FACTOR * noise_std + max_abs_value) * num_clients * scale
  exact = 2 * max_abs_value * largest * scale + 1
  bits = max(math.ceil(math.log2(paper)), math.ceil(math.log2(exact)), 2)
  if bits > MAX_BITS:
    raise ValueError(f"secure aggregation needs {bits} bits (> {MAX_BITS}); "
                     "use fewer fractional bits or a smaller cohort")
  return bits


def _modulus_mask(bits: int) -> jax.Array:
  return jnp.uint32((1 << bits) - 1)


def encode(x: jax.Array, scale: float) -> tuple[jax.Array, jax.Array]:
  """Fixed-point encoding ``round(x * scale)`` as int32.

  Args:
    x: A contribution; an integer array is taken as is (scale must be 1).
    scale: ``2^f``, a power of two, so ``x * scale`` is exact in float32.

  Returns:
    ``(q, bad)``: int32 encodings and where x could not be encoded (not
    finite or ``|x * scale| >= 2^31``; those entries are clamped).
  """
  if jnp.issubdtype(x.dtype, jnp.integer):
    return x.astype(jnp.int32), jnp.zeros(x.shape, bool)
  v = x.astype(jnp.float32) * scale
  bad = ~(jnp.abs(v) <= _ENCODABLE)  # also catches NaN
  q = jnp.round(jnp.clip(jnp.nan_to_num(v), -_ENCODABLE, _ENCODABLE))
  return q.astype(jnp.int32), bad


def decode(total: jax.Array, bits: int, scale: float) -> jax.Array:
  """Two's-complement reading of a sum modulo 2^b, divided by the scale.

  Args:
    total: uint32 values in [0, 2^b).
    bits: b.
    scale: The fixed-point scale.

  Returns:
    float32 values in ``[-2^(b-1), 2^(b-1)) / scale``.
  """
  shift = 32 - bits
  signed = jax.lax.shift_right_arithmetic(
      jax.lax.bitcast_convert_type(total << shift, jnp.int32), jnp.int32(shift))
  return signed.astype(jnp.float32) / scale


def _edge_stream(key: jax.Array, source: jax.Array, target: jax.Array,
                 offset: int, shape: tuple[int, ...], bits: int) -> jax.Array:
  """The mask stream of the ring edge ``source -> target`` at ``offset``.

  Both endpoints derive it from their pair key ``s_uv`` (symmetric in the
  two client ids) and the edge's direction and ring offset.
  """
  lo, hi = jnp.minimum(source, target), jnp.maximum(source, target)
  pair = jax.random.fold_in(jax.random.fold_in(key, lo), hi)
  edge = jax.random.fold_in(jax.random.fold_in(pair, offset),
                            (source < target).astype(jnp.int32))
  return jax.random.bits(edge, shape, jnp.uint32) & _modulus_mask(bits)


def ring_positions(slot_mask: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The ring of sampled slots.

  Returns:
    ``(position, slot_at, size)``: each slot's place on the ring (-1 for
    padding), the slot at each ring position, and the number of sampled
    clients |K|.
  """
  capacity = slot_mask.shape[0]
  size = jnp.sum(slot_mask).astype(jnp.int32)
  position = jnp.where(slot_mask, jnp.cumsum(slot_mask) - 1, -1).astype(jnp.int32)
  slot_at = jnp.nonzero(slot_mask, size=capacity, fill_value=0)[0].astype(jnp.int32)
  return position, slot_at, size


def client_mask(key: jax.Array, client_ids: jax.Array, slot_mask: jax.Array,
                slot: jax.Array, shape: tuple[int, ...], bits: int, neighbours: int,
                dropped: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """One client's zero-sum mask, and the part a server must remove on failures.

  Client at ring position p adds the stream of each edge ``p -> p+j`` and
  subtracts that of each edge ``p-j -> p``, j = 1..d (mod |K|).

  Args:
    key: The round's secure-aggregation key.
    client_ids: (capacity,) client ids of the cohort slots.
    slot_mask: (capacity,) sampled slots.
    slot: This client's slot (must be a sampled one).
    shape: Shape of a contribution.
    bits: b.
    neighbours: d.
    dropped: (capacity,) sampled clients that failed, or None.

  Returns:
    ``(mask, unmatched)``: uint32 values mod 2^b; ``unmatched`` is the part of
    the mask from edges to dropped clients (zero if ``dropped`` is None).
  """
  position, slot_at, size = ring_positions(slot_mask)
  ring = jnp.maximum(size, 1)
  me = position[slot]
  mod = _modulus_mask(bits)
  mask = jnp.zeros(shape, jnp.uint32)
  unmatched = jnp.zeros(shape, jnp.uint32)
  for j in range(1, neighbours + 1):
    for sign, other_pos in ((1, (me + j) % ring), (-1, (me - j) % ring)):
      other = slot_at[other_pos]
      src, dst = (client_ids[slot], client_ids[other]) if sign > 0 else \
          (client_ids[other], client_ids[slot])
      stream = _edge_stream(key, src, dst, j, shape, bits)
      mask = (mask + stream if sign > 0 else mask - stream) & mod
      if dropped is not None:
        lost = jnp.where(dropped[other], stream, jnp.uint32(0))
        unmatched = (unmatched + lost if sign > 0 else unmatched - lost) & mod
  return mask, unmatched


def mask_contributions(encoded: jax.Array, slot_mask: jax.Array, client_ids: jax.Array,
                       key: jax.Array, bits: int, neighbours: int = 1) -> jax.Array:
  """Every sampled client's masked vector ``q_k + mask_k mod 2^b``.

  Args:
    encoded: (capacity, m) int32 encodings.
    slot_mask: (capacity,) sampled slots; padding rows come back as zeros.
    client_ids: (capacity,) client ids.
    key: The round's secure-aggregation key.
    bits: b.
    neighbours: d.

  Returns:
    (capacity, m) uint32 masked vectors in [0, 2^b).
  """
  shape = encoded.shape[1:]

  def one(q, slot):
    mask, _ = client_mask(key, client_ids, slot_mask, slot, shape, bits, neighbours)
    return (q.astype(jnp.uint32) + mask) & _modulus_mask(bits)

  slots = jnp.arange(encoded.shape[0])
  masked = jax.vmap(one)(encoded, slots)
  return jnp.where(slot_mask[:, None], masked, jnp.uint32(0))


def modular_sum(values: jax.Array, include: jax.Array, bits: int) -> jax.Array:
  """``sum_k values_k mod 2^b`` over the included rows (uint32)."""
  kept = jnp.where(include[:, None], values.astype(jnp.uint32), jnp.uint32(0))
  return jnp.sum(kept, axis=0, dtype=jnp.uint32) & _modulus_mask(bits)


class SecureSum(NamedTuple):
  """Result of :func:`secure_sum`.

  Attributes:
    total: (m,) float32 decoded sum of the present clients' contributions.
    overflow: Number of coordinates whose decoded sum is wrong (true sum
      outside the modulus' range, or a contribution not encodable).
  """

  total: jax.Array
  overflow: jax.Array


class SecureState(NamedTuple):
  """The server's running state while masked vectors arrive.

  Attributes:
    masked: Sum of the received masked vectors mod 2^b.
    removed: Sum of the masks to remove (pairs with a dropped client).
    hi: Simulation only: the encodings' exact sum over 2^16 (signed, floor).
    lo: Simulation only: that sum mod 2^16 (``hi * 2^16 + lo`` is the sum).
    bad: Simulation only: a contribution could not be encoded, or the sum
      ran beyond 2^46 in magnitude (counted as overflowed).
  """

  masked: jax.Array
  removed: jax.Array
  hi: jax.Array
  lo: jax.Array
  bad: jax.Array


def secure_init(shape: tuple[int, ...]) -> SecureState:
  """The empty state for contributions of the given shape."""
  zeros_u = jnp.zeros(shape, jnp.uint32)
  zeros_i = jnp.zeros(shape, jnp.int32)
  return SecureState(zeros_u, zeros_u, zeros_i, zeros_i, jnp.zeros(shape, bool))


def secure_accumulate(state: SecureState, contributions: jax.Array, slots: jax.Array,
                      slot_mask: jax.Array, present: jax.Array, client_ids: jax.Array,
                      key: jax.Array, bits: int, scale: float,
                      neighbours: int = 1) -> SecureState:
  """Adds the masked vectors of some clients (one at a time, ``lax.scan``).

  Args:
    state: The running state.
    contributions: (r, m) contributions of the clients in ``slots``.
    slots: (r,) their cohort slots.
    slot_mask: (capacity,) sampled clients (they hold pairwise masks).
    present: (capacity,) sampled clients whose masked vector arrives.
    client_ids: (capacity,) client ids.
    key: The round's secure-aggregation key.
    bits: b <= 31.
    scale: Fixed-point scale (1 for integers).
    neighbours: d, ring neighbours on each side.

  Returns:
    The new state.
  """
  if not 2 <= bits <= MAX_BITS:
    raise ValueError(f"bits must be in [2, {MAX_BITS}], got {bits}")
  shape = contributions.shape[1:]
  mod = _modulus_mask(bits)
  present = present & slot_mask
  dropped = slot_mask & ~present

  def body(st, inputs):
    x, slot = inputs
    q, q_bad = encode(x, scale)
    mask, unmatched = client_mask(key, client_ids, slot_mask, slot, shape, bits,
                                  neighbours, dropped)
    sent = present[slot]
    y = (q.astype(jnp.uint32) + mask) & mod
    # Exact integer sum in two limbs: |q >> 16| < 2^15, q & 0xffff < 2^16. The
    # low limb carries into the high one at every client (it wrapped past
    # 32,767 clients); a high limb beyond 2^30 (partial sums beyond 2^46:
    # more than 2^15 clients of extreme values) is counted as an overflow,
    # never wrapped into range.
    lo = st.lo + jnp.where(sent, q & 0xFFFF, 0)
    hi = st.hi + jnp.where(sent, jax.lax.shift_right_arithmetic(q, jnp.int32(16)), 0) + (lo >> 16)
    return SecureState(
        masked=(st.masked + jnp.where(sent, y, jnp.uint32(0))) & mod,
        removed=(st.removed + jnp.where(sent, unmatched, jnp.uint32(0))) & mod,
        hi=hi, lo=lo & 0xFFFF,
        bad=st.bad | (sent & q_bad) | (jnp.abs(hi) > (1 << 30))), None

  state, _ = jax.lax.scan(body, state, (contributions, slots))
  return state


def secure_finalize(state: SecureState, bits: int, scale: float) -> SecureSum:
  """Removes the unmatched masks, decodes, and counts overflowed coordinates."""
  mod = _modulus_mask(bits)
  total = decode((state.masked - state.removed) & mod, bits, scale)
  # True sum s = s_hi * 2^16 + s_lo with 0 <= s_lo < 2^16; it fits int32 when
  # |s_hi| < 2^14, and must lie in [-2^(b-1), 2^(b-1)).
  s_hi = state.hi + (state.lo >> 16)
  s_lo = state.lo & 0xFFFF
  small = (s_hi >= -(1 << 14)) & (s_hi < (1 << 14))
  exact = jnp.where(small, s_hi, 0) * 65536 + s_lo
  half = 1 << (bits - 1)
  in_range = small & (exact >= -half) & (exact < half)
  overflow = jnp.sum(state.bad | ~in_range).astype(jnp.int32)
  return SecureSum(total, overflow)


def secure_sum(contributions: jax.Array, slot_mask: jax.Array, present: jax.Array,
               client_ids: jax.Array, key: jax.Array, bits: int, scale: float,
               neighbours: int = 1) -> SecureSum:
  """The server's result of one secure-aggregation round.

  Encodes each contribution, masks it (pairs among the sampled clients),
  sums the masked vectors of the present clients modulo 2^b, removes the
  masks of the pairs whose other end dropped out (Bonawitz et al. 2016
  recovery), and decodes. One client at a time, so memory is O(m) beyond
  the contributions.

  Args:
    contributions: (capacity, m) float (fixed-point encoded with ``scale``)
      or integer contributions.
    slot_mask: (capacity,) sampled clients (they hold pairwise masks).
    present: (capacity,) sampled clients whose masked vector arrived.
    client_ids: (capacity,) client ids.
    key: The round's secure-aggregation key.
    bits: b <= 31.
    scale: Fixed-point scale (1 for integers).
    neighbours: d, ring neighbours on each side.

  Returns:
    :class:`SecureSum`.
  """
  state = secure_accumulate(secure_init(contributions.shape[1:]), contributions,
                            jnp.arange(contributions.shape[0]), slot_mask, present,
                            client_ids, key, bits, scale, neighbours)
  return secure_finalize(state, bits, scale)
