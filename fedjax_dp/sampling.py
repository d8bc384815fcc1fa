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

Cyclic Poisson sampling (Choquette-Choo et al. 2023, "(Amplified) Banded
Matrix Factorization", Sec. 4; ``cycle_length`` b > 1): the clients form b
groups (client i is in group i mod b), round t draws only from group
(t - 1) mod b, each of its clients with probability min(1, b q), so the
expected cohort is still q N and a client's participations are at least b
rounds apart (the min-separation that banded and BLT noise assume).

Participation across rounds (:class:`Schedule`; Choquette-Choo et al. 2024,
"Near exact privacy amplification for matrix mechanisms"; Dong and Ganesh
2026), accounted by Monte Carlo (``fedjax_dp.privacy.monte_carlo``):

* ``balls-in-bins``: each client is put once in one of B = round(1/q) bins,
  uniformly at random; round t takes every client of bin (t - 1) mod B, so
  the cohort is a Binomial(N, 1/B) draw, the same every B rounds, and a
  client's rounds are exactly B apart.
* ``b-min-sep``: each round every client that did not join in the previous
  b - 1 rounds joins with probability p = 1 / (1/q - b + 1), from the
  process's stationary start, so the expected cohort is q N and a client's
  rounds are at least b apart (b = 1: Poisson sampling; b = 1/q: balls-in-bins
  with random bins).

Both are pure functions of the run's participation key and the round: a
round recomputes the clients' state from round 1 (N numbers a round, a
negligible cost beside training), so a resumed run draws the same cohorts.

A pool of clients may make up a set share of every cohort
(:class:`PoolShare`; the attack's malicious clients, thesis Ch. 6,
``fedjax_dp.features.attack``): the other clients are then sampled exactly as
above among themselves (Poisson at rate q, or |K| - m of them without
replacement), and m of the pool join so that they are a fraction alpha of
the cohort. The other clients' sampling, and so their epsilon, is the
accountant's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

SAMPLERS = ("poisson", "fixed", "balls-in-bins", "b-min-sep")
# Samplers whose cohorts depend on earlier rounds (:class:`Schedule`).
SCHEDULED = ("balls-in-bins", "b-min-sep")


class PoolShare(NamedTuple):
  """A pool of clients that fills a set share of every cohort.

  Attributes:
    pool: (N,) bool, the pool's clients (an attack's malicious clients).
    fraction: alpha, the share of every cohort they make up.
  """

  pool: jax.Array
  fraction: float


class Schedule(NamedTuple):
  """Balls-in-bins or b-min-sep participation (the module docstring).

  Attributes:
    kind: One of :data:`SCHEDULED`.
    key: The run's participation key (``keys.PARTICIPATION``).
    separation: The bins B (balls-in-bins) or b (b-min-sep).
    prob: b-min-sep's p; 1.0 for balls-in-bins.
  """

  kind: str
  key: jax.Array
  separation: int
  prob: float = 1.0


def schedule_for(sampler: str, key: jax.Array, rate: float,
                 min_separation: int | None) -> Schedule | None:
  """The :class:`Schedule` of ``sampler`` at rate q (None for the others).

  >>> s = schedule_for("b-min-sep", jax.random.PRNGKey(0), 1 / 60, 4)
  >>> s.separation, round(s.prob, 5)
  (4, 0.01754)
  >>> schedule_for("balls-in-bins", jax.random.PRNGKey(0), 1 / 60, None).separation
  60

  Raises:
    ValueError: One line: b-min-sep without b, or b > 1/q.
  """
  if sampler == "balls-in-bins":
    return Schedule(sampler, key, bins_for(rate))
  if sampler != "b-min-sep":
    return None
  if min_separation is None:
    raise ValueError("b-min-sep sampling needs its b (min_separation)")
  inverse = 1.0 / rate - min_separation + 1.0
  if inverse < 1.0 - 1e-9:
    raise ValueError(f"b-min-sep with b = {min_separation} cannot keep q = {rate:.4g} of the "
                     f"clients a round: b is at most 1/q = {1.0 / rate:.4g}")
  return Schedule(sampler, key, int(min_separation), min(1.0, 1.0 / inverse))


def bins_for(rate: float) -> int:
  """Balls-in-bins' B = round(1/q), the bins that give q N clients a round.

  >>> bins_for(1 / 60), bins_for(0.3)
  (60, 3)
  """
  return max(1, int(round(1.0 / rate)))


def stationary_wait(key: jax.Array, num_clients: int, separation: int,
                     prob: float) -> jax.Array:
  """(N,) int32: b-min-sep's stationary start (jax-privacy's ``warm_start``):
  a client waits j = 1..b-1 more rounds with probability p / (1 + (b - 1) p)
  each, else is eligible (wait 0); ``prob`` may be traced."""
  u = jax.random.uniform(key, (num_clients,))
  eligible = 1.0 / (1.0 + (separation - 1) * prob)
  later = 1 + jnp.floor((u - eligible) / (prob * eligible)).astype(jnp.int32)
  return jnp.where(u < eligible, 0, jnp.minimum(separation - 1, later)).astype(jnp.int32)


def _min_sep_step(schedule: Schedule, wait: jax.Array, t) -> tuple[jax.Array, jax.Array]:
  """Round t of b-min-sep: (the waits after it, who joined)."""
  u = jax.random.uniform(jax.random.fold_in(schedule.key, t), wait.shape)
  join = (wait == 0) & (u < schedule.prob)
  return jnp.where(join, schedule.separation - 1, jnp.maximum(wait - 1, 0)), join


def scheduled_members(schedule: Schedule, num_clients: int, t: jax.Array | int) -> jax.Array:
  """(N,) bool: the clients round t (from 1) takes under ``schedule``."""
  if schedule.kind == "balls-in-bins":
    bins = jax.random.randint(jax.random.fold_in(schedule.key, 0), (num_clients,), 0,
                              schedule.separation)
    return bins == (t - 1) % schedule.separation
  wait = stationary_wait(jax.random.fold_in(schedule.key, 0), num_clients,
                          schedule.separation, schedule.prob)
  wait = jax.lax.fori_loop(1, t, lambda s, w: _min_sep_step(schedule, w, s)[0], wait)
  return _min_sep_step(schedule, wait, t)[1]


def scheduled_rounds(schedule: Schedule, num_clients: int, rounds: int) -> np.ndarray:
  """(T, N) bool: every round's members at once (one pass; equal to
  :func:`scheduled_members` round by round)."""
  ts = jnp.arange(1, rounds + 1)
  if schedule.kind == "balls-in-bins":
    return np.asarray(jax.vmap(lambda t: scheduled_members(schedule, num_clients, t))(ts))
  wait = stationary_wait(jax.random.fold_in(schedule.key, 0), num_clients,
                          schedule.separation, schedule.prob)
  _, joined = jax.lax.scan(lambda w, t: _min_sep_step(schedule, w, t), wait, ts)
  return np.asarray(joined)


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
                  sampler: str = "poisson", share: PoolShare | None = None, *,
                  cycle_length: int = 1, t: jax.Array | int = 1,
                  schedule: Schedule | None = None) -> Cohort:
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
    share: A pool that makes up a share of the cohort (see the module
      docstring; :func:`_with_pool`); None: every client alike.
    cycle_length: b, cyclic Poisson sampling over b groups (module
      docstring; Poisson only, no ``share``); 1: every client every round.
    t: The round, from 1 (which group a cycle samples).
    schedule: Balls-in-bins or b-min-sep (``sampler`` one of :data:`SCHEDULED`):
      the round's members are :func:`scheduled_members`, in random slot order.

  Returns:
    The :class:`Cohort`.

  >>> cohort = sample_cohort(jax.random.PRNGKey(0), 10, 0.3, 4, sampler="fixed")
  >>> int(cohort.num_sampled), cohort.mask.tolist()
  (3, [True, True, True, False])
  >>> len(set(cohort.indices.tolist()))
  4
  """
  u = jax.random.uniform(key, (num_clients,))
  if sampler in SCHEDULED:
    if schedule is None or schedule.kind != sampler or share is not None or cycle_length > 1:
      raise ValueError(f"{sampler} sampling needs its Schedule, no pool and no cycle")
    u = jnp.where(scheduled_members(schedule, num_clients, t), u, 2.0)
    sampler, rate = "poisson", 1.0  # every member joins, in the order of u
  if cycle_length > 1:
    check_cycle(cycle_length, sampler, share is not None)
    # Clients outside the round's group never join: u past every rate.
    u = jnp.where(jnp.arange(num_clients) % cycle_length == (t - 1) % cycle_length, u, 2.0)
    rate = min(1.0, rate * cycle_length)
  if share is not None:
    return _with_pool(u, rate, capacity, sampler, share)
  _, order = jax.lax.top_k(-u, capacity)
  if sampler == "poisson":
    num_sampled = jnp.sum(u < rate)
  elif sampler == "fixed":
    num_sampled = jnp.asarray(fixed_cohort_size(num_clients, rate))
  else:
    raise ValueError(f"unknown sampler {sampler!r}; choose one of {SAMPLERS}")
  mask = jnp.arange(capacity) < num_sampled
  return Cohort(order.astype(jnp.int32), mask, num_sampled.astype(jnp.int32))


def pool_slots(num_clients: int, rate: float, fraction: float) -> int:
  """Fixed-size sampling: m = ceil(alpha |K|) of every cohort's slots go to the pool.

  Rounding up keeps the other clients' rate (|K| - m) / (N - M) at or below
  q = |K| / N when the pool is M = round(alpha N) (:func:`check_pool_share`).

  >>> pool_slots(100, 0.1, 0.2), pool_slots(100, 0.1, 0.25)
  (2, 3)
  """
  size = fixed_cohort_size(num_clients, rate)
  return min(size, math.ceil(fraction * size - 1e-9))


def check_pool_share(num_clients: int, rate: float, sampler: str, pool_size: int,
                     fraction: float) -> None:
  """Raises ValueError (one line) if a pool of ``pool_size`` cannot make up
  ``fraction`` of every fixed-size cohort with the honest clients sampled at
  most at rate q (the accountant's epsilon would not hold for them)."""
  if sampler != "fixed":
    return
  size = fixed_cohort_size(num_clients, rate)
  share = pool_slots(num_clients, rate, fraction)
  honest_rate = (size - share) / max(1, num_clients - pool_size)
  if share > pool_size or honest_rate > size / num_clients + 1e-12:
    raise ValueError(f"malicious fraction {fraction:g} of {num_clients} clients cannot fill "
                     f"{share} of {size} cohort slots without sampling honest clients more "
                     f"often than q = {size / num_clients:g}; use selection 'fixed'")


def check_cycle(cycle_length: int, sampler: str, pooled: bool = False) -> None:
  """Raises ValueError (one line) for cyclic sampling the run cannot use.

  >>> check_cycle(4, "poisson")
  >>> check_cycle(4, "fixed")
  Traceback (most recent call last):
  ...
  ValueError: cyclic sampling (cycle_length 4) is Poisson sampling within a group; got sampler 'fixed'
  """
  if int(cycle_length) != cycle_length or cycle_length < 1:
    raise ValueError(f"cycle_length must be a positive int, got {cycle_length}")
  if cycle_length > 1 and sampler != "poisson":
    raise ValueError(f"cyclic sampling (cycle_length {cycle_length}) is Poisson sampling "
                     f"within a group; got sampler {sampler!r}")
  if cycle_length > 1 and pooled:
    raise ValueError(f"cyclic sampling (cycle_length {cycle_length}) cannot place a pool in "
                     "every cohort")


def _with_pool(u: jax.Array, rate: float, capacity: int, sampler: str,
               share: PoolShare) -> Cohort:
  """The cohort when a pool fills a share alpha of it.

  The other (honest) clients join as without the pool, among themselves:
  Poisson (u < q) or the |K| - m smallest u. Then m of the pool, the smallest u
  first: m = ceil(alpha |K|) for fixed-size sampling, round(alpha / (1 -
  alpha) h) for Poisson with h honest clients (so m / (h + m) is alpha up to
  rounding), never more than the pool. Slots: honest, then malicious, then
  padding (the slots without attackers would have had).
  """
  num_clients = u.shape[0]
  pool = share.pool
  pool_size = jnp.sum(pool)
  _, honest_order = jax.lax.top_k(-jnp.where(pool, 2.0, u), capacity)
  _, pool_order = jax.lax.top_k(-jnp.where(pool, u, 2.0), capacity)
  if sampler == "poisson":
    honest = jnp.sum((u < rate) & ~pool)
    alpha = share.fraction
    joining = jnp.round(alpha / (1.0 - alpha) * honest).astype(jnp.int32)
  elif sampler == "fixed":
    joining = jnp.int32(pool_slots(num_clients, rate, share.fraction))
    honest = fixed_cohort_size(num_clients, rate) - joining
  else:
    raise ValueError(f"unknown sampler {sampler!r}; choose one of {SAMPLERS}")
  joining = jnp.minimum(joining, pool_size)
  slot = jnp.arange(capacity)
  from_pool = (slot >= honest) & (slot < honest + joining)
  order = jnp.where(from_pool, pool_order[jnp.clip(slot - honest, 0, capacity - 1)],
                    honest_order)
  num_sampled = (honest + joining).astype(jnp.int32)
  return Cohort(order.astype(jnp.int32), slot < num_sampled, num_sampled)


def fixed_cohort_size(num_clients: int, rate: float) -> int:
  """|K| = round(C * N) for fixed-size sampling, at least 1.

  >>> fixed_cohort_size(6000, 0.01), fixed_cohort_size(10, 0.01)
  (60, 1)
  """
  return max(1, int(round(rate * num_clients)))


def planned_cohort_sizes(round_keys: jax.Array, num_clients: int, rate: float,
                         sampler: str = "poisson", share: PoolShare | None = None, *,
                         cycle_length: int = 1, schedule: Schedule | None = None
                         ) -> np.ndarray:
  """(rounds,) every round's cohort size |K_t|, from the keys the run will use
  (round t's key in row t - 1)."""
  if schedule is not None:
    rounds = scheduled_rounds(schedule, num_clients, round_keys.shape[0])
    return rounds.sum(axis=1).astype(np.int64)
  if cycle_length > 1:
    ts = jnp.arange(1, round_keys.shape[0] + 1)
    sizes = jax.vmap(lambda k, t: sample_cohort(k, num_clients, rate, 1, sampler, share,
                                                cycle_length=cycle_length, t=t).num_sampled
                     )(round_keys, ts)
    return np.asarray(sizes, np.int64)
  if share is not None:
    sizes = jax.vmap(lambda k: sample_cohort(k, num_clients, rate, 1, sampler, share)
                     .num_sampled)(round_keys)
    return np.asarray(sizes, np.int64)
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

  >>> keys = jax.random.split(jax.random.PRNGKey(0), 5)
  >>> plan_capacity(keys, 100, 0.5, sampler="fixed", multiple=8)
  56
  """
  return capacity_for(planned_cohort_sizes(round_keys, num_clients, rate, sampler),
                      num_clients, multiple)


def capacity_for(sizes: np.ndarray, num_clients: int, multiple: int = 4) -> int:
  """The largest of ``sizes`` rounded up to ``multiple``, at most N.

  >>> capacity_for(np.array([3, 7, 5]), 100), capacity_for(np.array([9]), 10)
  (8, 10)
  """
  largest = max(1, int(np.max(sizes)))
  return int(min(num_clients, -(-largest // multiple) * multiple))


def max_participations(sampling_keys: jax.Array, num_clients: int, rate: float,
                       capacity: int, sampler: str, rounds_list,
                       share: PoolShare | None = None, *, cycle_length: int = 1,
                       schedule: Schedule | None = None) -> list[int]:
  """Largest number of rounds any client joined within rounds 1..t, per t.

  Recomputes every round's cohort from the run's sampling keys exactly as
  the round does (:func:`sample_cohort` with the run's capacity).
  """
  ts = jnp.arange(1, sampling_keys.shape[0] + 1)
  cohorts = jax.jit(jax.vmap(lambda k, t: sample_cohort(
      k, num_clients, rate, capacity, sampler, share, cycle_length=cycle_length, t=t,
      schedule=schedule)))(sampling_keys, ts)
  indices, mask = np.asarray(cohorts.indices), np.asarray(cohorts.mask)
  joined = np.zeros((indices.shape[0], num_clients), np.int32)
  rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
  np.add.at(joined, (rows, indices.reshape(-1)), mask.reshape(-1).astype(np.int32))
  running = np.cumsum(joined, axis=0).max(axis=1)
  return [int(running[t - 1]) if t >= 1 else 0 for t in rounds_list]
