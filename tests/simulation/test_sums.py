"""The round's sums (``simulation.sums``): plain, secure and robust, chunk by chunk."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import aggregators
from fedjax_dp.round_types import Chunk
from fedjax_dp.simulation import sums

ROWS = jnp.array([[1.0, -2.0, 3.0], [10.0, 20.0, -30.0], [0.5, 0.25, 0.125],
                  [-4.0, 8.0, 16.0]])
PRESENT = jnp.array([True, True, False, True])  # slot 2 was sampled and failed


def _slots(present=PRESENT, mask=None):
  mask = jnp.ones(4, bool) if mask is None else mask
  chunk = Chunk(ids=jnp.arange(4), mask=mask, present=present, take=lambda a: a)
  slots = sums.Slots(positions=jnp.arange(4), mask=mask, present=present, ids=jnp.arange(4),
                     key=jax.random.PRNGKey(3))
  return chunk, slots


def _sum_in_two_chunks(summer, rows, present=PRESENT):
  """The sum of two chunks of two slots, as the round adds them."""
  acc = summer.init(rows.shape[1:], rows.dtype)
  for c in (0, 1):
    part = slice(2 * c, 2 * c + 2)
    chunk = Chunk(jnp.arange(4)[part], jnp.ones(2, bool), present[part], lambda a: a)
    slots = sums.Slots(jnp.arange(4)[part], jnp.ones(4, bool), present, jnp.arange(4),
                       jax.random.PRNGKey(3))
    acc = summer.add(acc, rows[part], chunk, slots)
  return summer.finish(acc)


def test_plain_sums_the_present_rows_and_integers_exactly():
  total, overflow = _sum_in_two_chunks(sums.Plain(), ROWS)
  np.testing.assert_allclose(total, ROWS[0] + ROWS[1] + ROWS[3])
  assert total.dtype == jnp.float32 and int(overflow) == 0
  # int8 signs of 200 slots: summed in int32, so 200 does not wrap at 127.
  signs = jnp.ones((200, 3), jnp.int8)
  acc = sums.Plain().init((3,), jnp.int8)
  acc = sums.Plain().add(acc, signs, Chunk(jnp.arange(200), jnp.ones(200, bool),
                                           jnp.ones(200, bool), lambda a: a), None)
  assert acc.dtype == jnp.int32 and acc.tolist() == [200, 200, 200]


def test_secure_sum_gives_the_present_rows_sum_and_counts_overflow():
  # Fixed point at scale 2^16 in a 31-bit ring: within 2^-16 a value of the sum.
  total, overflow = _sum_in_two_chunks(sums.Secure(bits=31, scale=2.0**16, neighbours=2), ROWS)
  np.testing.assert_allclose(total, ROWS[0] + ROWS[1] + ROWS[3], atol=3 * 2.0**-16)
  assert int(overflow) == 0
  # A 12-bit ring at scale 2^8 holds sums in [-8, 8): the columns' 7, 26 and
  # -11 put two outside it, and they are counted.
  _, overflow = _sum_in_two_chunks(sums.Secure(bits=12, scale=2.0**8, neighbours=2), ROWS)
  assert int(overflow) == 2


def test_robust_sum_is_the_rule_times_the_present_count():
  median = aggregators.AggregatorConfig(name="median")
  summer = sums.make(None, 1.0, 2, median)
  assert isinstance(summer, sums.Robust) and not summer.streams
  chunk, slots = _slots()
  total, overflow = summer.finish(summer.add(summer.init((3,), jnp.float32), ROWS, chunk,
                                             slots))
  present_rows = np.asarray(ROWS)[np.asarray(PRESENT)]
  np.testing.assert_allclose(total, 3 * np.median(present_rows, axis=0))
  assert int(overflow) == 0


@pytest.mark.parametrize("bits, aggregator, kind", [
    (None, None, sums.Plain), (None, aggregators.AggregatorConfig(), sums.Plain),
    (16, None, sums.Secure), (None, aggregators.AggregatorConfig(name="median"), sums.Robust)])
def test_make_picks_the_sum(bits, aggregator, kind):
  assert isinstance(sums.make(bits, 1.0, 2, aggregator), kind)
