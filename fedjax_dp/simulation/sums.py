"""How the server sums a round's contributions: plain, secure or robust.

A sum is three pure functions the round calls (``simulation.round``):
``init`` (the empty accumulator for contributions of a shape and dtype),
``add`` (one chunk of slots' contributions, where present) and ``finish``
(the float32 total and the count of coordinates that overflowed). A
streaming sum adds the cohort chunk by chunk; a robust rule
(``streams = False``) needs every update at once and is added in one chunk.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp import aggregators
from fedjax_dp.round_types import Chunk
from fedjax_dp.privacy import noise, secure_aggregation


class Slots(NamedTuple):
  """The round's slots as a secure sum sees them (all slots, padded).

  Attributes:
    positions: (chunk,) the chunk's slot positions.
    mask: (slots,) sampled slots (they hold pairwise masks).
    present: (slots,) sampled slots whose masked vector arrives.
    ids: (slots,) client ids.
    key: The round's ``keys.SECURE_AGG`` key.
  """

  positions: jax.Array
  mask: jax.Array
  present: jax.Array
  ids: jax.Array
  key: jax.Array


class Plain:
  """The plain sum of the present contributions (integers summed exactly)."""

  streams = True

  def init(self, shape: tuple[int, ...], dtype) -> jax.Array:
    integer = jnp.issubdtype(dtype, jnp.integer)
    return jnp.zeros(shape, jnp.int32 if integer else dtype)

  def add(self, acc: jax.Array, contributions: jax.Array, chunk: Chunk, slots: Slots
          ) -> jax.Array:
    del slots
    if jnp.issubdtype(acc.dtype, jnp.integer):
      return acc + jnp.sum(jnp.where(chunk.present[:, None], contributions, 0), axis=0,
                           dtype=acc.dtype)
    return acc + noise.masked_sum(contributions, chunk.present).astype(acc.dtype)

  def finish(self, acc: jax.Array) -> tuple[jax.Array, jax.Array]:
    return acc.astype(jnp.float32), jnp.int32(0)


class Secure(NamedTuple):
  """Simulated secure aggregation modulo 2^bits (``privacy.secure_aggregation``):
  the server learns only the sum of the present clients' contributions.

  Attributes:
    bits: b, the modulus' bits.
    scale: Fixed-point scale 2^f of real contributions (1 for integers).
    neighbours: d, ring neighbours each client shares a mask with.
  """

  bits: int
  scale: float
  neighbours: int
  streams: bool = True

  def init(self, shape: tuple[int, ...], dtype) -> Any:
    del dtype
    return secure_aggregation.secure_init(shape)

  def add(self, acc, contributions: jax.Array, chunk: Chunk, slots: Slots):
    del chunk
    return secure_aggregation.secure_accumulate(
        acc, contributions, slots.positions, slots.mask, slots.present, slots.ids, slots.key,
        self.bits, self.scale, self.neighbours)

  def finish(self, acc) -> tuple[jax.Array, jax.Array]:
    result = secure_aggregation.secure_finalize(acc, self.bits, self.scale)
    return result.total, result.overflow


class Robust(NamedTuple):
  """A robust rule (thesis Sec. 3.3.2, ``fedjax_dp.aggregators``) over every
  individual update: its estimate times the present count stands for the sum."""

  config: aggregators.AggregatorConfig
  streams: bool = False

  def init(self, shape: tuple[int, ...], dtype) -> jax.Array:
    del dtype
    return jnp.zeros(shape, jnp.float32)

  def add(self, acc: jax.Array, contributions: jax.Array, chunk: Chunk, slots: Slots
          ) -> jax.Array:
    del slots
    return acc + aggregators.aggregate(self.config, contributions,
                                       chunk.present) * jnp.sum(chunk.present)

  def finish(self, acc: jax.Array) -> tuple[jax.Array, jax.Array]:
    return acc, jnp.int32(0)


def make(secure_bits: int | None, secure_scale: float, secure_neighbours: int,
         aggregator: aggregators.AggregatorConfig | None):
  """The round's sum: secure when ``secure_bits``, robust for a robust
  ``aggregator``, else plain."""
  if secure_bits is not None:
    return Secure(secure_bits, secure_scale, secure_neighbours)
  if aggregator is not None and aggregator.robust:
    return Robust(aggregator)
  return Plain()
