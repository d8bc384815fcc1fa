"""Monte Carlo accounting of amplified matrix mechanisms (DP-FTRL).

A run with noise correlated across rounds by a lower-triangular Toeplitz
strategy C (first column ``c_col``, non-negative) releases ``C x + sigma z``
in units of S, x being the clients' clipped updates stacked over the rounds
and z ~ N(0, I). When the cohorts are drawn by a participation scheme that
keeps each client's rounds apart, the privacy of the whole run is that of a
dominating pair of distributions over R^T, a Gaussian mixture P (the
client's rows of x at 1 where it may take part, with the participation's
probabilities) against Q = N(0, sigma^2 I). Its privacy loss has no closed
form, but it can be *sampled*: draw y from P (or Q), evaluate ln P(y)/Q(y)
exactly, and estimate ``delta(epsilon) = E[(1 - e^(epsilon - L))_+]`` by
the mean over the draws (Choquette-Choo, Ganesh, Haque, Steinke and
Thakurta 2024, "Near exact privacy amplification for matrix mechanisms",
arXiv:2410.06266; Dong and Ganesh 2026, b-min-sep, arXiv:2602.09338).
jax-privacy 2.0 ships these samplers and losses
(``jax_privacy.experimental.monte_carlo.sample_generation``) in numpy, a
Python loop per draw for balls-in-bins; this module computes the same
losses vectorised in JAX, so that the millions of draws a delta of 1e-5
needs take a minute at most (tested against the exact likelihood ratio by
enumeration, and equal to jax-privacy's on its draws, except that from
three bands on jax-privacy 2.0.0 gives the last columns' norms in reverse
order):

* ``b-min-sep`` (:class:`Participation`): each round every client that did
  not take part in the previous b - 1 rounds joins with probability p,
  from the process's stationary start (jax-privacy's ``warm_start``);
  ``c_col`` has at most b entries (the bands: two participations' rows
  never overlap). b = 1 is Poisson sampling at rate p.
* ``balls-in-bins``: each client is put in one of B bins uniformly at random
  once; round t takes bin (t - 1) mod B. Any ``c_col`` (a BLT's whole
  Toeplitz column). The loss depends on y only through the B inner
  products with the mixture's means, a Gaussian vector drawn directly.

The estimate is turned into a bound that holds with a stated probability:
the mean of n draws of a variable in [0, 1] exceeds its expectation mu by
the Chernoff-Hoeffding bound ``P(mean <= a) <= exp(-n KL(a || mu))`` for
a < mu (jax-privacy's ``delta_calculation``, Fact 4.2 of arXiv:2412.16802),
so ``delta_upper(epsilon)``, the largest mu with ``n KL(mean || mu) <=
ln(2 / beta)``, is at least delta(epsilon) with probability 1 - beta / 2,
and the epsilon at which both directions' upper bounds (P against Q, Q
against P) reach the target delta is an upper bound on the run's epsilon
with probability at least 1 - beta over the accounting's draws
(:func:`estimate`). The same bounds from below give a lower end, for
comparing with an exact accountant (``tests/privacy/test_monte_carlo.py``:
one band under Poisson agrees with PLD within it).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import pathlib
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from fedjax_dp import atomic, sampling
from fedjax_dp.privacy import bisection

PARTICIPATIONS = ("b-min-sep", "balls-in-bins")
# Draws per jitted call: (T, CHUNK) float32 arrays of a few tens of MB at T = 200.
CHUNK = 1 << 15
# The defaults of a run's accounting (``--mc-samples``, ``--mc-confidence``):
# 4 million draws of each direction bound epsilon 1 at delta 1e-5 within
# about 0.05 of the estimate, in the time docs/performance.md gives.
DEFAULT_SAMPLES = 4_000_000
DEFAULT_CONFIDENCE = 0.99
# Bumped when the sampling or the bound changes, so cached results are not reused.
_CACHE_VERSION = 2


@dataclasses.dataclass(frozen=True)
class Participation:
  """A participation scheme whose amplification the accounting counts.

  Attributes:
    kind: One of :data:`PARTICIPATIONS`.
    rounds: T.
    separation: b of b-min-sep; the bins B of balls-in-bins.
    prob: b-min-sep's p (a client's chance to join when eligible); 1.0
      for balls-in-bins.
  """

  kind: str
  rounds: int
  separation: int
  prob: float = 1.0

  def __post_init__(self):
    if self.kind not in PARTICIPATIONS:
      raise ValueError(f"unknown participation {self.kind!r}; choose one of "
                       f"{', '.join(PARTICIPATIONS)}")
    if int(self.rounds) != self.rounds or self.rounds < 1:
      raise ValueError(f"rounds must be a positive int, got {self.rounds}")
    if int(self.separation) != self.separation or self.separation < 1:
      raise ValueError(f"separation must be a positive int, got {self.separation}")
    if not 0.0 < self.prob <= 1.0:
      raise ValueError(f"prob must be in (0, 1], got {self.prob}")
    if self.kind == "balls-in-bins" and self.prob != 1.0:
      raise ValueError("balls-in-bins has no prob: every client of the round's bin joins")

  def rate(self) -> float:
    """The expected fraction of clients in a round: p / (1 + (b - 1) p)
    for b-min-sep (from its stationary start), 1 / B for balls-in-bins."""
    if self.kind == "balls-in-bins":
      return 1.0 / self.separation
    return self.prob / (1.0 + (self.separation - 1) * self.prob)

  def jax_privacy(self):
    """The same scheme as jax-privacy's ``batch_selection`` strategy."""
    from jax_privacy import batch_selection  # pylint: disable=import-outside-toplevel
    if self.kind == "balls-in-bins":
      return batch_selection.BallsInBinsSampling(iterations=self.rounds,
                                                 cycle_length=self.separation)
    return batch_selection.BMinSepSampling(sampling_prob=self.prob, iterations=self.rounds,
                                           min_sep=self.separation, warm_start=True)


def min_sep_prob(rate: float, separation: int) -> float:
  """b-min-sep's p that keeps the expected cohort at q N: ``1 / (1/q - b + 1)``.

  >>> min_sep_prob(1 / 60, 4)
  0.017543859649122806

  Raises:
    ValueError: b > 1/q (no p keeps the cohort; b = 1/q is p = 1).
  """
  inverse = 1.0 / rate - separation + 1.0
  if inverse < 1.0 - 1e-9:
    raise ValueError(f"b-min-sep with separation {separation} cannot keep a rate of "
                     f"{rate:.4g} a round (at most 1/{separation}); lower the separation")
  return min(1.0, 1.0 / inverse)


def check_strategy(participation: Participation, c_col) -> np.ndarray:
  """``c_col`` as a float64 vector, checked for the participation.

  Raises:
    ValueError: One line: not 1-D, negative, or more bands than b-min-sep's b.
  """
  c = np.asarray(c_col, np.float64)
  if c.ndim != 1 or c.size < 1:
    raise ValueError(f"c_col must be a non-empty 1-D vector, got shape {c.shape}")
  if np.any(c < 0):
    raise ValueError("Monte Carlo accounting needs a non-negative strategy column; "
                     f"the smallest entry is {c.min():.3g}")
  if participation.kind == "b-min-sep" and c.size > participation.separation:
    raise ValueError(f"b-min-sep accounting needs at most b = {participation.separation} "
                     f"bands; the strategy has {c.size}")
  return c[:participation.rounds]


# ---------------------------------------------------------------------------
# The privacy losses of draws from the dominating pair.
# ---------------------------------------------------------------------------


def _shift_sum(c: jax.Array, x: jax.Array, forward: bool) -> jax.Array:
  """(T, m): ``sum_k c_k x[t - k]`` (forward: C x) or ``sum_k c_k x[t + k]``
  (C^T x) along axis 0, zero past the ends."""
  rounds = x.shape[0]
  out = jnp.zeros_like(x)
  for k in range(c.shape[0]):
    if k >= rounds:
      break
    if forward:
      out = out.at[k:].add(c[k] * x[:rounds - k])
    else:
      out = out.at[:rounds - k].add(c[k] * x[k:])
  return out


def _joins(key: jax.Array, prob: jax.Array, *, rounds: int, separation: int,
           num: int) -> jax.Array:
  """(T, num) 0/1: the rounds a client joins under b-min-sep, from the
  process's stationary start (jax-privacy's ``warm_start``): it waits
  j = 1..b-1 more rounds with probability p / (1 + (b - 1) p) each, else is
  eligible; once eligible it joins after Geometric(p) rounds, then waits
  b - 1 rounds."""
  b = separation
  k_start, k_gaps = jax.random.split(key)
  wait0 = sampling.stationary_wait(k_start, num, b, prob).astype(jnp.float32)

  def gap(i):
    """Geometric(p) trials to the next join once eligible (>= 1), capped past T."""
    u = jax.random.uniform(jax.random.fold_in(k_gaps, i), (num,), minval=1e-30)
    return jnp.minimum(jnp.floor(jnp.log(u) / jnp.log1p(-prob)) + 1.0, rounds + 1.0)

  def body(carry):
    i, at, x = carry
    x = x.at[at.astype(jnp.int32), jnp.arange(num)].set(1.0, mode="drop")
    return i + 1, at + (b - 1) + gap(i + 1), x

  # A join every b rounds at most: the loop ends by ceil(T / b) + 1 passes.
  _, _, x = jax.lax.while_loop(lambda c: jnp.any(c[1] < rounds), body,
                               (0, wait0 + gap(0) - 1.0, jnp.zeros((rounds, num))))
  return x


def _min_sep_draw(key: jax.Array, c: jax.Array, sigma: jax.Array, prob: jax.Array, *,
                  rounds: int, separation: int, num: int, positive: bool) -> jax.Array:
  """(T, num) draws y of P (``C x + sigma z``, x the client's rounds,
  :func:`_joins`) or of Q = N(0, sigma^2 I)."""
  k_join, k_noise = jax.random.split(key)
  y = sigma * jax.random.normal(k_noise, (rounds, num))
  if not positive:
    return y
  x = _joins(k_join, prob, rounds=rounds, separation=separation, num=num)
  return y + _shift_sum(c, x, forward=True)


def _min_sep_loss(y: jax.Array, c: jax.Array, sigma: jax.Array, prob: jax.Array,
                  separation: int) -> jax.Array:
  """(num,) ln P(y)/Q(y) for b-min-sep: the backward recursion of
  arXiv:2602.09338, Eq. (2), in logs, as jax-privacy's
  ``_compute_b_min_sep_privacy_loss_no_truncation`` but with the norms of
  C's last columns (cut by the end of the run) in their order: column T - 1
  has norm^2 c_0^2, column T - 2 c_0^2 + c_1^2, and so on."""
  b, rounds = separation, y.shape[0]
  dots = _shift_sum(c, y, forward=False)  # <y, C e_i>: the rows a join at round i moves
  sq = jnp.full((rounds,), jnp.sum(c ** 2))
  tail = min(rounds, c.shape[0]) - 1  # the last columns of C are cut at round T
  if tail > 0:
    sq = sq.at[rounds - tail:].set(jnp.cumsum(c ** 2)[:tail][::-1])
  llr = (2.0 * dots - sq[:, None]) / (2.0 * sigma ** 2)
  log_p, log_q = jnp.log(prob), jnp.log1p(-prob)  # log_q = -inf at p = 1: every eligible joins

  def back(buf, i):
    value = jnp.logaddexp(log_q + buf[(i + 1) % b], log_p + llr[i] + buf[i % b])
    return buf.at[i % b].set(value), None

  buf, _ = jax.lax.scan(back, jnp.zeros((b, y.shape[1]), y.dtype),
                        jnp.arange(rounds - 1, -1, -1))
  # From the stationary start: eligible at round 0, or only from round j on.
  buf = buf.at[1:].add(log_p)
  return jax.scipy.special.logsumexp(buf, axis=0) - jnp.log1p((b - 1) * prob)


@functools.partial(jax.jit, static_argnames=("rounds", "separation", "num", "positive"))
def _min_sep_losses(key: jax.Array, c: jax.Array, sigma: jax.Array, prob: jax.Array, *,
                    rounds: int, separation: int, num: int, positive: bool) -> jax.Array:
  """(num,) ln P(y)/Q(y) for y drawn from P (positive) or Q, b-min-sep."""
  y = _min_sep_draw(key, c, sigma, prob, rounds=rounds, separation=separation, num=num,
                    positive=positive)
  return _min_sep_loss(y, c, sigma, prob, separation)


@functools.partial(jax.jit, static_argnames=("num", "positive"))
def _bins_losses(key: jax.Array, gram: jax.Array, chol: jax.Array, sigma: jax.Array, *,
                 num: int, positive: bool) -> jax.Array:
  """(num,) ln P(y)/Q(y) for balls-in-bins (arXiv:2410.06266).

  P is the mean of B Gaussians N(m_j, sigma^2 I), m_j = C x_j for the bin
  j's rounds; the loss needs only w_j = <y, m_j>, with w = G e_s + sigma g,
  g ~ N(0, G) (G the Gram matrix of the m_j, s the client's bin, drawn
  uniformly; Q: w = sigma g).
  """
  bins = gram.shape[0]
  k_bin, k_noise = jax.random.split(key)
  # Full float32: a GPU's default (TF32) would round g's every draw to 10 bits.
  g = jnp.matmul(chol, jax.random.normal(k_noise, (bins, num)),
                 precision=jax.lax.Precision.HIGHEST)
  w = sigma * g
  if positive:
    w = w + gram[:, jax.random.randint(k_bin, (num,), 0, bins)]
  return _bins_loss(w, gram, sigma)


def _bins_loss(w: jax.Array, gram: jax.Array, sigma: jax.Array) -> jax.Array:
  """(num,) ln P(y)/Q(y) from w = (<y, m_j>)_j: ``log mean_j exp((2 w_j -
  ||m_j||^2) / (2 sigma^2))``, as jax-privacy's ``_compute_balls_in_bins_privacy_loss``."""
  per_bin = (2.0 * w - jnp.diag(gram)[:, None]) / (2.0 * sigma ** 2)
  return jax.scipy.special.logsumexp(per_bin, axis=0) - jnp.log(gram.shape[0])


def bins_means(participation: Participation, c: np.ndarray) -> np.ndarray:
  """(B, T) the balls-in-bins means m_j = C x_j, x_j the rounds of bin j (float64)."""
  rounds, bins = participation.rounds, participation.separation
  toeplitz = np.zeros((rounds, rounds))
  for k, value in enumerate(c[:rounds]):
    toeplitz += value * np.eye(rounds, k=-k)
  x = (np.arange(rounds)[None, :] % bins) == np.arange(bins)[:, None]
  return x.astype(np.float64) @ toeplitz.T


def bins_gram(participation: Participation, c: np.ndarray) -> np.ndarray:
  """(B, B) Gram matrix of the balls-in-bins means (:func:`bins_means`)."""
  means = bins_means(participation, c)
  return means @ means.T


def losses(participation: Participation, c_col, sigma: float, num: int, seed: int,
           positive: bool = True) -> np.ndarray:
  """(num,) privacy losses of draws from P (``positive``) or Q, as float64.

  ``ln P(y)/Q(y)`` in both cases; the Q-against-P direction's loss is its
  negative. Drawn in chunks of :data:`CHUNK` from ``seed`` (JAX keys,
  the same on every machine).

  Args:
    participation: The participation scheme.
    c_col: The strategy's first column (non-negative, at most b entries for
      b-min-sep).
    sigma: The noise multiplier (noise std S sigma on ``C x``, not scaled by
      the column's norm).
    num: Draws.
    seed: The accounting's seed.
    positive: Draw from P (the client takes part) or Q.
  """
  c = check_strategy(participation, c_col)
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma}")
  root = jax.random.fold_in(jax.random.PRNGKey(seed), int(positive))
  out, chunk_size = [], min(CHUNK, int(num))
  if participation.kind == "balls-in-bins":
    gram = bins_gram(participation, c)
    # G can be singular in floating point (bins past T, say): a symmetric square root.
    vals, vecs = np.linalg.eigh(gram)
    chol = jnp.asarray(vecs * np.sqrt(np.clip(vals, 0.0, None)), jnp.float32)
    gram32 = jnp.asarray(gram, jnp.float32)
  for start in range(0, num, chunk_size):
    size = min(chunk_size, num - start)
    key = jax.random.fold_in(root, start // chunk_size)
    if participation.kind == "balls-in-bins":
      chunk = _bins_losses(key, gram32, chol, jnp.float32(sigma), num=chunk_size, positive=positive)
    else:
      chunk = _min_sep_losses(key, jnp.asarray(c, jnp.float32), jnp.float32(sigma),
                              jnp.float32(participation.prob), rounds=participation.rounds,
                              separation=participation.separation, num=chunk_size,
                              positive=positive)
    out.append(np.asarray(chunk, np.float64)[:size])
  return np.concatenate(out)


# ---------------------------------------------------------------------------
# From losses to epsilon, with a stated probability.
# ---------------------------------------------------------------------------


def fewest_samples(delta: float, confidence: float) -> int:
  """The fewest draws with which :func:`estimate` can bound ``delta`` at all:
  with none of n draws above epsilon, the bound on delta is still about
  ln(2 / beta) / n.

  >>> fewest_samples(1e-5, 0.99)
  529832
  """
  return math.ceil(math.log(2.0 / (1.0 - confidence)) / delta)


def _kl(a: float, b: float) -> float:
  return float(special.rel_entr(a, b) + special.rel_entr(1.0 - a, 1.0 - b))


def mean_bound(mean: float, num: int, beta: float, upper: bool = True) -> float:
  """The Chernoff-Hoeffding (KL) confidence bound on the expectation of a
  [0, 1] variable whose n-draw mean is ``mean``: at least the expectation
  with probability 1 - beta (``upper``), or at most it (the lower bound).

  >>> round(mean_bound(0.0, 1000, 0.05), 5)
  0.00299
  >>> mean_bound(0.5, 10**6, 0.01) > 0.5 > mean_bound(0.5, 10**6, 0.01, upper=False)
  True
  """
  level = math.log(1.0 / beta) / num
  # Each bound is the end of the final bracket on its safe side (the KL
  # divergence at or past the level), never a root finder's nearby point.
  if upper:
    if mean >= 1.0 or _kl(mean, 1.0) <= level:
      return 1.0
    return bisection.bisect(lambda mu: _kl(mean, mu) >= level, mean, 1.0, 1e-12)[1]
  if mean <= 0.0 or _kl(mean, 0.0 + 1e-300) <= level:
    return 0.0
  return bisection.bisect(lambda mu: _kl(mean, mu) <= level, 1e-300, mean, 1e-12)[0]


class _Tail(NamedTuple):
  """The draws that can add to delta at epsilon >= 0 (the rest add 0)."""

  losses: np.ndarray  # the losses above 0, sorted
  num: int  # all draws

  @classmethod
  def of(cls, values: np.ndarray) -> "_Tail":
    return cls(np.sort(values[values > 0.0]), int(values.size))

  def delta(self, epsilon: float) -> float:
    """The draws' mean of ``(1 - e^(epsilon - L))_+``."""
    above = self.losses[np.searchsorted(self.losses, epsilon, side="right"):]
    return float(np.sum(-np.expm1(epsilon - above)) / self.num)


def _epsilon_at(tails: list[_Tail], delta: float, bound) -> float:
  """The smallest epsilon >= 0 at which ``bound(tail, epsilon) <= delta`` for
  every direction (each decreases in epsilon); inf if none."""
  def worst(eps):
    return max(bound(t, eps) for t in tails)
  if worst(0.0) <= delta:
    return 0.0
  top = max((float(t.losses[-1]) for t in tails if t.losses.size), default=0.0) + 1.0
  if worst(top) > delta:
    return math.inf
  # The bracket's upper end: where the bound holds (a root finder's point
  # may sit just below it).
  return bisection.bisect(lambda e: worst(e) <= delta, 0.0, top, 1e-7, floor=1.0)[1]


class Estimate(NamedTuple):
  """A Monte Carlo epsilon (:func:`estimate`).

  Attributes:
    epsilon: Upper bound on the run's epsilon at ``delta``, holding with
      probability ``confidence`` over the accounting's draws.
    epsilon_lower: The matching lower end (the true epsilon is below it with
      probability at most 1 - ``confidence``).
    epsilon_estimate: The plain estimate (the draws' mean delta).
    delta: The target delta.
    samples: Draws of each direction.
    confidence: 1 - beta.
    seed: The accounting's seed.
    seconds: Time taken (0 when read from the cache).
  """

  epsilon: float
  epsilon_lower: float
  epsilon_estimate: float
  delta: float
  samples: int
  confidence: float
  seed: int
  seconds: float

  def fields(self) -> dict:
    """What a run's record keeps of the accounting."""
    return {"epsilon_method": "monte-carlo", "mc_samples": self.samples,
            "mc_confidence": self.confidence, "mc_seed": self.seed,
            "mc_epsilon_estimate": self.epsilon_estimate,
            "mc_epsilon_lower": self.epsilon_lower, "mc_seconds": self.seconds}


def estimate(participation: Participation, c_col, sigma: float, delta: float, *,
             samples: int = DEFAULT_SAMPLES, confidence: float = DEFAULT_CONFIDENCE,
             seed: int = 0, cache: bool = True) -> Estimate:
  """The Monte Carlo epsilon of the whole run at ``delta``.

  Both directions of the dominating pair are drawn (``samples`` each, from
  ``seed``); each gets beta / 2 of the failure probability (module
  docstring). Cached on disk per setting (:func:`cache_dir`), so a table
  or a sweep pays once.

  Args:
    participation: The participation scheme.
    c_col: The strategy's first column.
    sigma: The noise multiplier.
    delta: Target delta in (0, 1).
    samples: Draws of each direction.
    confidence: 1 - beta in (0, 1).
    seed: The accounting's seed.
    cache: Read and write the on-disk cache.

  Returns:
    The :class:`Estimate`.
  """
  if not 0.0 < delta < 1.0:
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  if int(samples) != samples or samples < 1:
    raise ValueError(f"samples must be a positive int, got {samples}")
  c = check_strategy(participation, c_col)
  key = _cache_key(participation, c, sigma, delta, samples, confidence, seed)
  if cache:
    found = _cache_read(key)
    if found is not None:
      return Estimate(**dict(found, seconds=0.0))
  started = time.perf_counter()
  tails = [_Tail.of(losses(participation, c, sigma, samples, seed, positive=True)),
           _Tail.of(-losses(participation, c, sigma, samples, seed, positive=False))]
  beta = (1.0 - confidence) / 2.0
  upper = _epsilon_at(tails, delta, lambda t, e: mean_bound(t.delta(e), t.num, beta))
  lower = _epsilon_at(tails, delta,
                      lambda t, e: mean_bound(t.delta(e), t.num, beta, upper=False))
  point = _epsilon_at(tails, delta, lambda t, e: t.delta(e))
  out = Estimate(upper, lower, point, float(delta), int(samples), float(confidence), int(seed),
                 round(time.perf_counter() - started, 2))
  if cache:
    _cache_write(key, out)
  return out


def sigma_for_epsilon(participation: Participation, c_col, target_epsilon: float,
                      delta: float, *, samples: int = DEFAULT_SAMPLES,
                      confidence: float = DEFAULT_CONFIDENCE, seed: int = 0,
                      tolerance: float = 1e-3, cache: bool = True,
                      bracket: tuple[float, float] = (0.0, 1.0)) -> float:
  """The smallest sigma (to ``tolerance``, rounded up) whose Monte Carlo
  epsilon bound (:func:`estimate`, the same draws' seed) is at most
  ``target_epsilon``.

  Bisection over sigma from ``bracket`` (its top doubled until it meets the
  target, its bottom halved until it does not; a close bracket saves
  evaluations of a minute each). A run should account the sigma found with
  a *different* seed (the record's), so that its bound is not chosen from
  its own draws.

  Raises:
    ValueError: No sigma up to 1e4 reaches the target.
  """
  if not target_epsilon > 0:
    raise ValueError(f"target_epsilon must be > 0, got {target_epsilon}")

  def eps(sigma):
    return estimate(participation, c_col, sigma, delta, samples=samples,
                    confidence=confidence, seed=seed, cache=cache).epsilon

  hi = bisection.smallest(lambda s: eps(s) <= target_epsilon, tolerance, *bracket, top=1e4)
  if hi is None:
    raise ValueError(f"no sigma up to 1e4 reaches epsilon {target_epsilon}")
  return math.ceil(hi / tolerance) * tolerance


# ---------------------------------------------------------------------------
# The on-disk cache.
# ---------------------------------------------------------------------------


def cache_dir() -> pathlib.Path:
  """``$FEDJAX_DP_CACHE/monte_carlo``, else under the user cache
  (``$XDG_CACHE_HOME/fedjax_dp`` or ``~/.cache/fedjax_dp``), as the data files."""
  from fedjax_dp.data import idx  # pylint: disable=import-outside-toplevel
  return idx.cache_dir() / "monte_carlo"


def _cache_key(participation: Participation, c: np.ndarray, sigma: float, delta: float,
               samples: int, confidence: float, seed: int) -> str:
  # The draws also depend on how they are chunked and on JAX's PRNG layout;
  # a result under another of either is valid but not the recorded seed's draws.
  text = json.dumps([_CACHE_VERSION, CHUNK, bool(jax.config.jax_threefry_partitionable),
                     dataclasses.astuple(participation),
                     [float(v).hex() for v in c], float(sigma).hex(), float(delta).hex(),
                     int(samples), float(confidence).hex(), int(seed)])
  return hashlib.sha256(text.encode()).hexdigest()[:32]


def _cache_read(key: str) -> dict | None:
  path = cache_dir() / f"{key}.json"
  try:
    found = json.loads(path.read_text())
  except (OSError, ValueError):
    return None
  found.pop("seconds", None)
  return found if set(found) == set(Estimate._fields) - {"seconds"} else None


def _cache_write(key: str, value: Estimate) -> None:
  folder = cache_dir()
  try:
    folder.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_file(folder / f"{key}.json", "w") as f:
      json.dump({k: v for k, v in value._asdict().items() if k != "seconds"}, f)
  except OSError:  # a read-only home: the result is still returned
    pass


__all__ = ["CHUNK", "DEFAULT_CONFIDENCE", "DEFAULT_SAMPLES", "Estimate", "PARTICIPATIONS",
           "Participation", "bins_gram", "bins_means", "cache_dir", "check_strategy", "estimate", "fewest_samples", "losses",
           "mean_bound", "min_sep_prob", "sigma_for_epsilon"]
