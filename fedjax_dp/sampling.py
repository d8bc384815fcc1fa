"""Client sampling into a fixed-capacity cohort.

The papers' algorithms select |K| = C*N clients uniformly at random each round
(UAI 2021, Algorithm 1 line 5), but their privacy analysis (the moments
accountant, UAI Theorem 1) is that of *Poisson* sampling: every client joins
independently with probability q = C. The simulator therefore samples by
Poisson by default, so the reported epsilon is valid for the sampler that ran,
and offers fixed-size sampling for the papers' literal procedure (whose
epsilon the accountant computes for sampling without replacement).

``jit`` needs static shapes, so a cohort is a fixed number of *slots*
(``capacity``) with a boolean mask marking real participants.

Capacity rule: :func:`plan_capacity` draws every round's Poisson cohort size
in advance (the draw is a pure function of the run key and the round) and
sets the capacity to the largest one, rounded up to a multiple of
``multiple``. A run therefore never truncates a cohort. A caller who picks a
smaller capacity gets *truncated* Poisson sampling (a uniformly random subset
of ``capacity`` of the sampled clients) and :class:`Cohort` reports the
untruncated size, so the truncation can be detected and accounted for
(``TruncatedSubsampledGaussianDpEvent``, PLD accountant).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

SAMPLERS = ("poisson", "fixed")


class Cohort(NamedTuple):
  """One round's sampled clients.

  Attributes:
    indices: (capacity,) int32 client ids; padding slots hold unsampled ids.
    mask: (capacity,) bool, True for real participants.
    num_sampled: Clients the sampler selected before any truncation.
  """

  indices: jax.Array
  mask: jax.Array
  num_sampled: jax.Array


def sample_cohort(key: jax.Array, num_clients: int, rate: float, capacity: int,
                  sampler: str = "poisson") -> Cohort:
  """Samples one round's cohort.

  Each client draws u ~ U(0, 1). Poisson: client i joins iff u_i < rate.
  Fixed: the ``round(rate * N)`` clients with the smallest u join (a uniform
  subset without replacement). Slots are filled in increasing u, so a Poisson
  draw larger than ``capacity`` keeps a uniformly random subset of it.

  Args:
    key: PRNG key of this round's sampling (used for nothing else).
    num_clients: N.
    rate: q = C, the expected fraction of clients per round.
    capacity: Number of slots (static).
    sampler: "poisson" or "fixed".

  Returns:
    The :class:`Cohort`.
  """
  u = jax.random.uniform(key, (num_clients,))
  _, order = jax.lax.top_k(-u, capacity)
  if sampler == "poisson":
    num_sampled = jnp.sum(u < rate)
  elif sampler == "fixed":
    num_sampled = jnp.asarray(fixed_cohort_size(num_clients, rate))
  else:
    raise ValueError(f"unknown sampler {sampler!r}; choose one of {SAMPLERS}")
  mask = jnp.arange(capacity) < num_sampled
  return Cohort(order.astype(jnp.int32), mask, num_sampled.astype(jnp.int32))


def fixed_cohort_size(num_clients: int, rate: float) -> int:
  """|K| = round(C * N) for fixed-size sampling, at least 1."""
  return max(1, int(round(rate * num_clients)))


def planned_cohort_sizes(round_keys: jax.Array, num_clients: int, rate: float,
                         sampler: str = "poisson") -> np.ndarray:
  """(rounds,) every round's cohort size |K_t|, from the keys the run will use."""
  if sampler == "fixed":
    return np.full((round_keys.shape[0],), fixed_cohort_size(num_clients, rate), np.int64)
  sizes = jax.vmap(lambda k: jnp.sum(jax.random.uniform(k, (num_clients,)) < rate)
                   )(round_keys)
  return np.asarray(sizes, np.int64)


def plan_capacity(round_keys: jax.Array, num_clients: int, rate: float,
                  sampler: str = "poisson", multiple: int = 4) -> int:
  """The smallest capacity that holds every round's cohort untruncated.

  Args:
    round_keys: (rounds, 2) the sampling keys the run will use, in order.
    num_clients: N.
    rate: q.
    sampler: "poisson" or "fixed".
    multiple: Round the capacity up to a multiple of this (device sharding).

  Returns:
    The capacity (never more than ``num_clients``).
  """
  return capacity_for(planned_cohort_sizes(round_keys, num_clients, rate, sampler),
                      num_clients, multiple)


def capacity_for(sizes: np.ndarray, num_clients: int, multiple: int = 4) -> int:
  """The largest of ``sizes`` rounded up to ``multiple``, at most N."""
  largest = max(1, int(np.max(sizes)))
  return int(min(num_clients, -(-largest // multiple) * multiple))


def max_participations(sampling_keys: jax.Array, num_clients: int, rate: float,
                       capacity: int, sampler: str, rounds_list) -> list[int]:
  """Largest number of rounds any client joined within rounds 1..t, per t.

  Recomputes every round's cohort from the run's sampling keys exactly as
  the round does (:func:`sample_cohort` with the run's capacity).
  """
  cohorts = jax.jit(jax.vmap(lambda k: sample_cohort(k, num_clients, rate, capacity,
                                                     sampler)))(sampling_keys)
  indices, mask = np.asarray(cohorts.indices), np.asarray(cohorts.mask)
  joined = np.zeros((indices.shape[0], num_clients), np.int32)
  rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
  np.add.at(joined, (rows, indices.reshape(-1)), mask.reshape(-1).astype(np.int32))
  running = np.cumsum(joined, axis=0).max(axis=1)
  return [int(running[t - 1]) if t >= 1 else 0 for t in rounds_list]
