"""Privacy accounting for client-level DP federated learning.

Each round samples a cohort of clients, clips every sampled client's update to
L2 norm S and adds ``N(0, (S sigma)^2)`` to the sum of the clipped updates
(UAI 2021 FL-TOP paper, Section 2.2). With client-level add/remove-one
neighbouring the sum has L2 sensitivity S, so one round is the subsampled
Gaussian mechanism with noise multiplier sigma, composed over ``rounds``
rounds. Three accountants are offered:

* ``"moments"``: the moments accountant of Abadi et al. 2016 ("Deep Learning
  with Differential Privacy") exactly as used by the UAI 2021 FL-TOP paper
  (Theorem 1) and the Kerkouche thesis: Renyi DP of the Poisson-subsampled
  Gaussian at the integer orders 2..33 (Mironov, Talwar and Zhang 2019,
  "Renyi Differential Privacy of the Sampled Gaussian Mechanism"), converted
  with ``eps = min_a T RDP(a) + log(1/delta) / (a - 1)``. Implemented here
  with numpy/scipy; it reproduces the papers' numbers.
* ``"rdp"``: ``dp_accounting.rdp.RdpAccountant`` with its default (fractional
  and integer) orders and its tighter RDP-to-(eps, delta) conversion.
* ``"pld"``: ``dp_accounting.pld.PLDAccountant`` (privacy loss distributions),
  the tightest of the three.

Sampling is Poisson with rate q by default. ``sampler="fixed"`` accounts for a
fixed-size cohort of ``m = round(q N)`` clients drawn uniformly without
replacement (what the papers' algorithms literally do), via the
without-replacement RDP bound of Wang, Balle and Kasiviswanathan 2019
("Subsampled Renyi Differential Privacy and Analytical Moments Accountant"),
which holds under replace-one neighbouring only.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import dp_accounting
import numpy as np
from scipy import special

from fedjax_dp.privacy import analytic_gaussian, bisection, monte_carlo
from fedjax_dp.sampling import SAMPLERS, SCHEDULED

ACCOUNTANTS = ("moments", "rdp", "pld")
# A run's accountants: the closed forms above and Monte Carlo accounting of
# amplified participation (fedjax_dp.privacy.monte_carlo, :func:`report`).
MONTE_CARLO = "monte-carlo"
RUN_ACCOUNTANTS = ACCOUNTANTS + (MONTE_CARLO,)

# Integer orders of the moments accountant (Abadi et al. 2016 use lambda = 1..32,
# i.e. Renyi orders a = lambda + 1 = 2..33).
MOMENTS_ORDERS = np.arange(2, 34)
# PLD discretisation: 1e-3 keeps a 200-round composition fast (its time and
# that of 1e-4: docs/performance.md, "Figures behind the code's choices") and
# is within ~5e-4 of 1e-4 on the paper settings; the PLD accountant rounds
# pessimistically, so the result remains an upper bound.
PLD_VALUE_DISCRETIZATION = 1e-3

_RDP_ORDERS = np.asarray(dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS,
                         dtype=np.float64)


def _check_config(accountant: str, sampler: str,
                  truncated_cohort: int | None) -> None:
  """Validates the accountant/sampler/truncation combination."""
  if accountant not in ACCOUNTANTS:
    raise ValueError(f"Unknown accountant {accountant!r}; expected one of {ACCOUNTANTS}.")
  if sampler not in SAMPLERS:
    raise ValueError(f"Unknown sampler {sampler!r}; expected one of {SAMPLERS}.")
  if sampler in SCHEDULED:
    # Their participations are not independent across rounds: no closed form
    # here holds for them (report(..., "monte-carlo", ...) accounts them).
    raise ValueError(
        f"The {accountant} accountant cannot account {sampler} sampling; use Monte Carlo "
        "accounting (accountant 'monte-carlo' in report, or fedjax_dp.privacy.monte_carlo).")
  if sampler == "fixed" and accountant != "rdp":
    raise ValueError(
        f"The {accountant} accountant assumes Poisson sampling; use accountant "
        "'rdp' with fixed-size (sampler='fixed') sampling.")
  if truncated_cohort is not None and (accountant != "pld" or sampler != "poisson"):
    raise ValueError("truncated_cohort is only supported with accountant 'pld' "
                     "and sampler 'poisson'.")


def _check_args(noise_multiplier, sampling_rate, delta, accountant, sampler,
                num_clients, truncated_cohort) -> None:
  """Validates the arguments shared by all public entry points."""
  if not noise_multiplier >= 0:
    raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}.")
  if not 0 < sampling_rate <= 1:
    raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}.")
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}.")
  _check_config(accountant, sampler, truncated_cohort)
  needs_clients = sampler == "fixed" or truncated_cohort is not None
  if needs_clients and (num_clients is None or int(num_clients) != num_clients
                        or num_clients < 1):
    raise ValueError("num_clients (a positive int) is required with sampler "
                     f"'fixed' or truncated_cohort, got {num_clients}.")
  if sampler == "fixed" and round(sampling_rate * num_clients) < 1:
    raise ValueError(f"sampling_rate * num_clients = {sampling_rate * num_clients}"
                     " rounds to a cohort of 0 clients.")
  if truncated_cohort is not None and (int(truncated_cohort) != truncated_cohort
                                       or truncated_cohort < 1):
    raise ValueError(f"truncated_cohort must be a positive int, got {truncated_cohort}.")


def _check_rounds(rounds) -> int:
  if int(rounds) != rounds or rounds < 0:
    raise ValueError(f"rounds must be a non-negative int, got {rounds}.")
  return int(rounds)


@functools.lru_cache(maxsize=512)
def _moments_rdp(sigma: float, q: float) -> np.ndarray:
  """RDP of one Poisson-subsampled Gaussian round at orders 2..33.

  Exact for integer orders (Mironov et al. 2019, Section 3.3):
  ``A_a = sum_k binom(a, k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 sigma^2))`` and
  ``RDP(a) = log(A_a) / (a - 1)``, evaluated in log space for all orders at once.
  """
  a = MOMENTS_ORDERS[:, None].astype(np.float64)
  k = np.arange(MOMENTS_ORDERS[-1] + 1, dtype=np.float64)[None, :]
  valid = k <= a
  k = np.where(valid, k, 0.0)  # Keeps gammaln finite in the masked-out cells.
  log_terms = (special.gammaln(a + 1) - special.gammaln(k + 1)
               - special.gammaln(a - k + 1)
               + special.xlog1py(a - k, -q) + special.xlogy(k, q)
               + (k * k - k) / (2.0 * sigma * sigma))
  log_terms = np.where(valid, log_terms, -np.inf)
  rdp = special.logsumexp(log_terms, axis=1) / (a[:, 0] - 1.0)
  rdp.setflags(write=False)
  return rdp


def _single_round_event(sigma: float, q: float, sampler: str,
                        num_clients: int | None) -> dp_accounting.DpEvent:
  """The dp_accounting event of one round (Poisson or without replacement)."""
  if sampler == "poisson":
    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
  # Fixed-size cohorts are only analysed under replace-one neighbouring (one
  # client's data swapped for another's). Then the sum of clipped updates
  # changes by u - u' with ||u - u'|| <= 2S, so noise N(0, (S sigma)^2) is the
  # Gaussian mechanism with unit sensitivity and noise multiplier sigma / 2.
  cohort = int(round(q * num_clients))
  return dp_accounting.SampledWithoutReplacementDpEvent(
      int(num_clients), cohort, dp_accounting.GaussianDpEvent(sigma / 2.0))


@functools.lru_cache(maxsize=512)
def _accountant_rdp(sigma: float, q: float, sampler: str,
                    num_clients: int | None) -> np.ndarray:
  """Per-round RDP at the default orders from ``RdpAccountant``.

  The accountant composes additively (``rdp += count * rdp_one_round``), so the
  T-round curve is ``T * rdp_one_round``; caching the one-round vector makes
  every further T cost a single ``compute_epsilon`` call instead of a fresh
  composition (their times: docs/performance.md, "Figures behind the code's
  choices"). The vector
  is read from the accountant's ``_rdp`` attribute (dp_accounting has no public
  getter); tests check the result equals ``get_epsilon`` of a fresh accountant.
  """
  relation = (dp_accounting.NeighboringRelation.REPLACE_ONE if sampler == "fixed"
              else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  acc = dp_accounting.rdp.RdpAccountant(_RDP_ORDERS, relation)
  acc.compose(_single_round_event(sigma, q, sampler, num_clients))
  rdp = np.array(acc._rdp, dtype=np.float64)  # pylint: disable=protected-access
  rdp.setflags(write=False)
  return rdp


@functools.lru_cache(maxsize=64)
def _poisson_round_pld(sigma: float, q: float):
  """The PLD of one Poisson-subsampled Gaussian round, as ``PLDAccountant``
  builds it for a ``PoissonSampledDpEvent`` (add-or-remove-one).

  Building it is most of a T-round epsilon's time (about 0.08 of 0.13 s), and
  it does not depend on T: an epsilon curve builds it once per (sigma, q).
  """
  return dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(
      standard_deviation=sigma, value_discretization_interval=PLD_VALUE_DISCRETIZATION,
      sampling_prob=q,
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)


@functools.lru_cache(maxsize=4096)
def _pld_epsilon(sigma: float, q: float, rounds: int, delta: float,
                 num_clients: int | None, truncated_cohort: int | None) -> float:
  """Epsilon from ``PLDAccountant`` for ``rounds`` composed rounds.

  Under Poisson sampling it takes the accountant's own steps (the identity
  PLD composed with the one-round PLD self-composed ``rounds`` times), with
  the one-round PLD cached: the same number, bit for bit (tested against a
  fresh accountant).
  """
  if truncated_cohort is None:
    pld = dp_accounting.pld.privacy_loss_distribution.identity(
        value_discretization_interval=PLD_VALUE_DISCRETIZATION)
    pld = pld.compose(_poisson_round_pld(sigma, q).self_compose(rounds))
    return float(pld.get_epsilon_for_delta(delta))
  event = dp_accounting.TruncatedSubsampledGaussianDpEvent(
      int(num_clients), q, int(truncated_cohort), sigma)
  acc = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=PLD_VALUE_DISCRETIZATION)
  acc.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
  return float(acc.get_epsilon(delta))


def epsilon_curve(noise_multiplier: float, sampling_rate: float,
                  rounds_list, delta: float, accountant: str = "moments",
                  sampler: str = "poisson", num_clients: int | None = None,
                  truncated_cohort: int | None = None) -> list[float]:
  """Epsilon after each number of rounds in ``rounds_list``.

  For "moments" and "rdp" the per-order RDP of one round is computed once
  (and cached) and scaled by each T, so a 200-point curve costs little. For
  "pld" each T needs its own self-composition of the one-round PLD, which is
  built once per (sigma, q) (their times at the default discretisation:
  docs/performance.md, "Figures behind the code's choices"; results are
  cached per T).

  Args:
    noise_multiplier: sigma; the noise on the sum has std ``S * sigma``.
    sampling_rate: Per-round client sampling rate q in (0, 1].
    rounds_list: Iterable of non-negative round counts T.
    delta: Target delta in (0, 1).
    accountant: One of ``ACCOUNTANTS``.
    sampler: "poisson", or "fixed" (with accountant "rdp"); balls-in-bins and
      b-min-sep sampling are accounted by Monte Carlo (:func:`report`).
    num_clients: Total number of clients N (needed by "fixed" and truncation).
    truncated_cohort: Cap B on the Poisson cohort (accountant "pld" only).

  Returns:
    The epsilons, in the order of ``rounds_list`` (0.0 for T = 0, inf for
    sigma = 0 and T > 0).

  Raises:
    ValueError: On invalid arguments or an unsupported combination.

  >>> curve = epsilon_curve(1.54, 1 / 60, [0, 50, 100, 200], 1e-5)
  >>> [round(e, 2) for e in curve]
  [0.0, 0.74, 0.84, 1.0]
  """
  _check_args(noise_multiplier, sampling_rate, delta, accountant, sampler,
              num_clients, truncated_cohort)
  rounds = [_check_rounds(t) for t in rounds_list]
  sigma, q, delta = float(noise_multiplier), float(sampling_rate), float(delta)
  if sigma == 0:
    return [0.0 if t == 0 else math.inf for t in rounds]
  if accountant == "moments":
    rdp = _moments_rdp(sigma, q)
    log_term = math.log(1.0 / delta) / (MOMENTS_ORDERS - 1.0)
    t = np.asarray(rounds, dtype=np.float64)[:, None]
    eps = np.min(t * rdp[None, :] + log_term[None, :], axis=1)
    return [0.0 if r == 0 else float(e) for r, e in zip(rounds, eps)]
  if accountant == "rdp":
    rdp = _accountant_rdp(sigma, q, sampler,
                          None if sampler == "poisson" else int(num_clients))
    return [float(dp_accounting.rdp.compute_epsilon(_RDP_ORDERS, t * rdp, delta)[0])
            if t else 0.0 for t in rounds]
  if truncated_cohort is not None:
    num_clients, truncated_cohort = int(num_clients), int(truncated_cohort)
  else:
    num_clients = None
  return [_pld_epsilon(sigma, q, t, delta, num_clients, truncated_cohort)
          if t else 0.0 for t in rounds]


def epsilon(noise_multiplier: float, sampling_rate: float, rounds: int,
            delta: float, accountant: str = "moments", sampler: str = "poisson",
            num_clients: int | None = None,
            truncated_cohort: int | None = None) -> float:
  """Epsilon of ``rounds`` rounds of the subsampled Gaussian mechanism.

  See the module docstring for the accountants (Abadi et al. 2016; Mironov et
  al. 2019; UAI 2021 FL-TOP Section 2.2 and Theorem 1; Wang-Balle-
  Kasiviswanathan 2019 for ``sampler="fixed"``). Cheap to call once per round:
  the per-round RDP vectors and PLD results are cached.

  Args:
    noise_multiplier: sigma; the noise on the sum has std ``S * sigma``.
    sampling_rate: Per-round client sampling rate q in (0, 1]; with
      ``sampler="fixed"`` the cohort size is ``round(q * num_clients)``.
    rounds: Number of composed rounds T >= 0.
    delta: Target delta in (0, 1).
    accountant: "moments", "rdp" or "pld".
    sampler: "poisson" or "fixed" (fixed-size, without replacement; "rdp"
      accountant only, replace-one neighbouring, sensitivity 2S).
    num_clients: Total number of clients N; required by "fixed" and by
      ``truncated_cohort``.
    truncated_cohort: If set, the Poisson cohort is truncated to at most this
      many clients by keeping a uniformly random subset ("pld" only).

  Returns:
    Epsilon; 0.0 if ``rounds == 0``, inf if ``noise_multiplier == 0``.

  Raises:
    ValueError: On invalid arguments or an unsupported combination.

  The papers' check (UAI 2021 Sec. 4, the thesis): sigma = 1.54, q = 1/60,
  T = 200, delta = 1e-5 give epsilon 1.00 with the moments accountant; the
  dp_accounting RDP conversion and PLD accountants give tighter bounds:

  >>> f"{epsilon(1.54, 1 / 60, 200, 1e-5, accountant='moments'):.2f}"
  '1.00'
  >>> f"{epsilon(1.54, 1 / 60, 200, 1e-5, accountant='rdp'):.2f}"
  '0.77'
  >>> epsilon(0.0, 1 / 60, 200, 1e-5), epsilon(1.54, 1 / 60, 0, 1e-5)
  (inf, 0.0)
  """
  return epsilon_curve(noise_multiplier, sampling_rate, [rounds], delta,
                       accountant, sampler, num_clients, truncated_cohort)[0]


def noise_multiplier_for_epsilon(target_epsilon: float, sampling_rate: float,
                                 rounds: int, delta: float,
                                 accountant: str = "moments",
                                 sampler: str = "poisson",
                                 num_clients: int | None = None,
                                 truncated_cohort: int | None = None,
                                 tolerance: float = 1e-4) -> float:
  """Smallest noise multiplier whose epsilon is at most ``target_epsilon``.

  Epsilon decreases in sigma, so sigma is bracketed by doubling from 1 and
  then bisected until the bracket is narrower than ``tolerance``.

  Args:
    target_epsilon: Target epsilon > 0.
    sampling_rate: Per-round client sampling rate q in (0, 1].
    rounds: Number of composed rounds T >= 1.
    delta: Target delta in (0, 1).
    accountant: As in ``epsilon``.
    sampler: As in ``epsilon``.
    num_clients: As in ``epsilon``.
    truncated_cohort: As in ``epsilon``.
    tolerance: Absolute tolerance on sigma (> 0).

  Returns:
    sigma with ``epsilon(sigma) <= target_epsilon`` and
    ``epsilon(sigma - tolerance) > target_epsilon``.

  Raises:
    ValueError: On invalid arguments, or if no sigma up to 1e6 reaches the
      target.

  >>> f"{noise_multiplier_for_epsilon(1.0, 1 / 60, 200, 1e-5):.2f}"
  '1.54'
  """
  if not target_epsilon > 0:
    raise ValueError(f"target_epsilon must be > 0, got {target_epsilon}.")
  if not tolerance > 0:
    raise ValueError(f"tolerance must be > 0, got {tolerance}.")
  if _check_rounds(rounds) == 0:
    raise ValueError("rounds must be >= 1 to calibrate a noise multiplier.")
  eps = functools.partial(
      epsilon, sampling_rate=sampling_rate, rounds=rounds, delta=delta,
      accountant=accountant, sampler=sampler, num_clients=num_clients,
      truncated_cohort=truncated_cohort)
  # epsilon(0) = inf > target.
  sigma = bisection.smallest(lambda s: eps(s) <= target_epsilon, tolerance)
  if sigma is None:
    raise ValueError(f"No noise multiplier <= 1e6 reaches epsilon {target_epsilon}.")
  return sigma


def accountant_label(accountant: str, sampler: str,
                     truncated_cohort: int | None = None) -> str:
  """Human-readable description of an accounting configuration.

  Args:
    accountant: One of ``ACCOUNTANTS``.
    sampler: "poisson" or "fixed" (with "rdp").
    truncated_cohort: Cap on the Poisson cohort, if any.

  Returns:
    A label such as "moments (RDP orders 2..33, Abadi et al. conversion),
    Poisson sampling".

  Raises:
    ValueError: On an unknown or unsupported combination.

  >>> accountant_label("pld", "poisson", truncated_cohort=64)
  'pld (dp_accounting PLDAccountant, discretization 0.001), Poisson sampling truncated to at most 64 clients'
  """
  _check_config(accountant, sampler, truncated_cohort)
  method = {
      "moments": "moments (RDP orders 2..33, Abadi et al. conversion)",
      "rdp": "rdp (dp_accounting RdpAccountant, default orders)",
      "pld": ("pld (dp_accounting PLDAccountant, discretization "
              f"{PLD_VALUE_DISCRETIZATION:g})"),
  }[accountant]
  if sampler == "fixed":
    sampling = ("fixed-size sampling without replacement (replace-one, "
                "sensitivity 2S)")
  elif truncated_cohort is not None:
    sampling = f"Poisson sampling truncated to at most {truncated_cohort} clients"
  else:
    sampling = "Poisson sampling"
  return f"{method}, {sampling}"


# ---------------------------------------------------------------------------
# FL-SIGN-DP: the distributed discrete Gaussian mechanism (thesis Sec. 5.2).
# ---------------------------------------------------------------------------

DG_ACCOUNTANTS = ("moments", "rdp")


def discrete_gaussian_kappa(scale: float) -> float:
  """kappa(xi) of thesis Lemma 1, ``2 e^{-2 pi^2 xi^2} / (1 - e^{-6 pi^2 xi^2})``.

  The continuous Gaussian pdf and the discrete Gaussian pmf of scale xi are
  within a factor ``1 +- kappa(xi)`` of each other at every integer.
  """
  if not scale > 0:
    raise ValueError(f"scale must be > 0, got {scale}.")
  a = 2.0 * math.pi ** 2 * float(scale) ** 2
  return 2.0 * math.exp(-a) / -math.expm1(-3.0 * a)


class SigmaTooSmall(ValueError):
  """A noise multiplier below what thesis Theorem 3 needs
  (:func:`discrete_gaussian_nu`): the theorem gives it no epsilon, which a
  calibration reads as not private enough."""


def discrete_gaussian_nu(noise_multiplier: float, num_params: int,
                         cohort_size: int) -> float:
  """The smallest nu of thesis Theorem 3 for the given noise.

  Theorem 3 needs ``sigma >= sqrt(|K| ln(2 + 2/nu) / (2 n pi^2))`` (each of
  the |K| shares ``DG(., sqrt(n) sigma / sqrt(|K|))`` is above the smoothing
  bound of Micciancio-Walter 2017, Lemma 3 of the thesis), i.e.
  ``nu = 2 / (exp(2 n pi^2 sigma^2 / |K|) - 2)``.

  Args:
    noise_multiplier: sigma.
    num_params: n, the length of the sign vector (L2 sensitivity sqrt(n)).
    cohort_size: |K|, the number of noise shares (the largest cohort).

  Returns:
    nu in (0, 1) (0.0 when it underflows).

  Raises:
    SigmaTooSmall: If no nu < 1 satisfies the condition (a ValueError).
  """
  x = 2.0 * num_params * math.pi ** 2 * float(noise_multiplier) ** 2 / cohort_size
  if not x > math.log(4.0):
    raise SigmaTooSmall(
        f"sigma = {noise_multiplier} is too small for Theorem 3 with n = {num_params}"
        f" and |K| = {cohort_size} (needs 2 n pi^2 sigma^2 / |K| > ln 4).")
  # 2 / (e^x - 2) in log space: no overflow for large x.
  return math.exp(math.log(2.0) - x - math.log1p(-2.0 * math.exp(-x)))


def _dg_correction(lam: np.ndarray, kappa: float, nu: float) -> np.ndarray:
  """``log((1+kappa)^lam / (1-kappa)^(lam+1) ((1+nu)/(1-nu))^3)`` (Theorem 3)."""
  if not (0 <= kappa < 1 and 0 <= nu < 1):
    raise ValueError(f"the bound needs kappa, nu < 1, got {kappa}, {nu}.")
  return (lam * math.log1p(kappa) - (lam + 1.0) * math.log1p(-kappa)
          + 3.0 * (math.log1p(nu) - math.log1p(-nu)))


def epsilon_discrete_gaussian_curve(noise_multiplier: float, sampling_rate: float,
                                    rounds_list, delta: float, num_params: int,
                                    cohort_size: int, accountant: str = "moments",
                                    sampler: str = "poisson",
                                    num_clients: int | None = None) -> list[float]:
  """Epsilon of FL-SIGN-DP after each T in ``rounds_list``, thesis Theorem 3.

  ``eps = min_lambda (T (alpha_G(lambda|C) + log((1+kappa)^lambda /
  (1-kappa)^(lambda+1) ((1+nu)/(1-nu))^3)) - log delta) / lambda`` with
  ``kappa = kappa(sqrt(n) sigma)`` (Lemma 1, Theorem 2) and nu from
  :func:`discrete_gaussian_nu` (Lemma 3: a sum of discrete Gaussians is
  within ``(1+nu)/(1-nu)`` of a discrete Gaussian). ``alpha_G(lambda|C)`` is
  the log moment of the subsampled Gaussian mechanism with noise multiplier
  sigma, i.e. ``lambda * RDP(lambda + 1)``:

  * "moments": integer lambda = 1..32 (orders 2..33), the papers' method;
  * "rdp": dp_accounting's RDP at its default orders, the correction added
    as ``correction(a - 1) / (a - 1)`` at order a, and its conversion.

  For the paper setting (n = 1,663,370, sigma ~ 1) kappa and nu underflow to
  0 and epsilon equals that of the continuous Gaussian mechanism.

  Args:
    noise_multiplier: sigma; the aggregate noise has scale ``sqrt(n) sigma``.
    sampling_rate: q = C.
    rounds_list: Round counts T >= 0.
    delta: Target delta.
    num_params: n.
    cohort_size: |K| (the largest number of shares; larger is conservative).
    accountant: "moments" or "rdp".
    sampler: "poisson", or "fixed" (with "rdp").
    num_clients: N (needed by "fixed").

  Returns:
    The epsilons.

  Raises:
    ValueError: On invalid arguments, for "pld" (the bound is a moments
      bound), or if sigma is too small for the theorem.
  """
  if accountant not in DG_ACCOUNTANTS:
    raise ValueError(f"the discrete Gaussian bound (thesis Theorem 3) is a moments/RDP "
                     f"bound; use accountant {' or '.join(DG_ACCOUNTANTS)}, "
                     f"not {accountant!r}.")
  _check_args(noise_multiplier, sampling_rate, delta, accountant, sampler,
              num_clients, None)
  if int(num_params) != num_params or num_params < 1:
    raise ValueError(f"num_params must be a positive int, got {num_params}.")
  if int(cohort_size) != cohort_size or cohort_size < 1:
    raise ValueError(f"cohort_size must be a positive int, got {cohort_size}.")
  rounds = [_check_rounds(t) for t in rounds_list]
  sigma, q, delta = float(noise_multiplier), float(sampling_rate), float(delta)
  if sigma == 0:
    return [0.0 if t == 0 else math.inf for t in rounds]
  kappa = discrete_gaussian_kappa(math.sqrt(num_params) * sigma)
  nu = discrete_gaussian_nu(sigma, int(num_params), int(cohort_size))
  if accountant == "moments":
    lam = MOMENTS_ORDERS - 1.0
    moment = lam * _moments_rdp(sigma, q) + _dg_correction(lam, kappa, nu)
    t = np.asarray(rounds, dtype=np.float64)[:, None]
    eps = np.min((t * moment[None, :] + math.log(1.0 / delta)) / lam[None, :], axis=1)
    return [0.0 if r == 0 else float(e) for r, e in zip(rounds, eps)]
  rdp = _accountant_rdp(sigma, q, sampler,
                        None if sampler == "poisson" else int(num_clients))
  lam = _RDP_ORDERS - 1.0
  rdp = rdp + _dg_correction(lam, kappa, nu) / lam
  return [float(dp_accounting.rdp.compute_epsilon(_RDP_ORDERS, t * rdp, delta)[0])
          if t else 0.0 for t in rounds]


def epsilon_discrete_gaussian(noise_multiplier: float, sampling_rate: float,
                              rounds: int, delta: float, num_params: int,
                              cohort_size: int, accountant: str = "moments",
                              sampler: str = "poisson",
                              num_clients: int | None = None) -> float:
  """Epsilon of ``rounds`` rounds of FL-SIGN-DP (thesis Theorem 3).

  See :func:`epsilon_discrete_gaussian_curve` for the bound and arguments.
  """
  return epsilon_discrete_gaussian_curve(noise_multiplier, sampling_rate, [rounds],
                                         delta, num_params, cohort_size, accountant,
                                         sampler, num_clients)[0]


def discrete_gaussian_label(accountant: str, sampler: str, noise_multiplier: float,
                            num_params: int, cohort_size: int) -> str:
  """Label of a Theorem 3 accounting, with its kappa and nu."""
  kappa = discrete_gaussian_kappa(math.sqrt(num_params) * noise_multiplier)
  nu = discrete_gaussian_nu(noise_multiplier, num_params, cohort_size)
  return (f"{accountant_label(accountant, sampler)}, discrete Gaussian bound "
          f"(thesis Thm 3: kappa={kappa:.2g}, nu={nu:.2g})")


# ---------------------------------------------------------------------------
# A scheme's mechanism, as data, and the one function that accounts it.
# ---------------------------------------------------------------------------

MECHANISMS = ("none", "gaussian", "discrete_gaussian")
# How a Gaussian mechanism's noise is correlated across rounds (DP-FTRL by
# matrix factorization; fedjax_dp.features.correlated_noise).
CORRELATIONS = ("independent", "banded", "blt")
LEVELS = ("client", "record")


class Mechanism(NamedTuple):
  """What one round of a scheme releases (``Scheme.mechanism``).

  Attributes:
    kind: "none" (no DP), "gaussian" (sum of clipped updates plus
      ``G(0, S^2 sigma^2)``) or "discrete_gaussian" (thesis Sec. 5.2: the
      sum of integer vectors plus discrete Gaussian shares, Theorem 3).
    noise_multiplier: sigma.
    level: "client" (a client's whole data, amplified by the cohort
      sampling) or "record" (one example of a client, CDP-LQ: each local
      step is a Poisson-subsampled Gaussian on the client's records).
    dimension: Values per message n, for the discrete Gaussian bound.
    record_rate: Record level: the per-step Poisson rate q = |B| / |D_k|.
    steps_per_round: Record level: local steps per participation (T_gd).
    correlation: ``CORRELATIONS``: "independent" (fresh noise every round),
      "banded" (column-normalized banded matrix factorization, at most as
      many bands as the sampling's cycle: amplified banded MF) or "blt"
      (buffered linear Toeplitz, noise scaled to the strategy's
      min-separation sensitivity: one Gaussian release, no amplification).
    strategy: The noise strategy's first column when it is Toeplitz (what
      Monte Carlo accounting needs; ``Feature.accounted``); empty: fresh
      noise every round, the column (1,).
  """

  kind: str = "none"
  noise_multiplier: float = 0.0
  level: str = "client"
  dimension: int = 0
  record_rate: float = 1.0
  steps_per_round: int = 1
  correlation: str = "independent"
  strategy: tuple = ()


class Sampling(NamedTuple):
  """How a run sampled its cohorts (what accounting needs of it).

  Attributes:
    rate: q = C.
    sampler: One of ``SAMPLERS``.
    num_clients: N.
    capacity: Theorem 3's |K|, the most noise shares a round splits its noise
      into: the cohort's slots and any feature's extra slots (an audit's
      canaries add their shares too), less the tolerated dropouts.
    max_cohort: Truncated Poisson cap, or None.
    participations: ``participations(rounds_list)``: the largest number of
      rounds any client joined within rounds 1..T, per T (record level).
    cycle_length: b, cyclic Poisson sampling over b groups (1: none).
    separation: b-min-sep's b, balls-in-bins' bins (Monte Carlo accounting).
    prob: b-min-sep's p (1.0 for balls-in-bins).
    monte_carlo: (samples, confidence, seed) of Monte Carlo accounting.
  """

  rate: float
  sampler: str
  num_clients: int
  capacity: int
  max_cohort: int | None = None
  participations: Callable[[list[int]], list[int]] | None = None
  cycle_length: int = 1
  separation: int = 1
  prob: float = 1.0
  monte_carlo: tuple = (monte_carlo.DEFAULT_SAMPLES, monte_carlo.DEFAULT_CONFIDENCE, 0)


class PrivacyReport(NamedTuple):
  """Epsilons after the requested round counts, a label, extra record fields."""

  epsilons: list
  label: str | None
  fields: dict


def check_mechanism(mechanism: Mechanism, accountant: str, sampler: str) -> None:
  """Raises ValueError (one line) when the accountant cannot account it."""
  if mechanism.kind not in MECHANISMS:
    raise ValueError(f"unknown mechanism {mechanism.kind!r}; expected one of {MECHANISMS}")
  if mechanism.level not in LEVELS:
    raise ValueError(f"unknown privacy level {mechanism.level!r}; expected one of {LEVELS}")
  if mechanism.correlation not in CORRELATIONS:
    raise ValueError(f"unknown noise correlation {mechanism.correlation!r}; expected one of "
                     f"{CORRELATIONS}")
  if mechanism.correlation != "independent" and (mechanism.kind, mechanism.level) != (
      "gaussian", "client"):
    raise ValueError(f"{mechanism.correlation} noise is accounted for a client-level "
                     "Gaussian mechanism only")
  if accountant == MONTE_CARLO and mechanism.kind != "none" and (
      mechanism.kind, mechanism.level) != ("gaussian", "client"):
    raise ValueError("monte-carlo accounting covers a client-level Gaussian mechanism; use "
                     "accountant 'rdp'")
  if mechanism.kind == "discrete_gaussian" and accountant not in DG_ACCOUNTANTS:
    raise ValueError("the discrete Gaussian bound (thesis Thm 3) is a moments/RDP bound; "
                     "use accountant 'moments' or accountant 'rdp'")
  del sampler


def report(mechanism: Mechanism, rounds_list, delta: float, accountant: str,
           sampling: Sampling) -> PrivacyReport:
  """Epsilon of ``mechanism`` after each round count in ``rounds_list``.

  * client-level Gaussian: :func:`epsilon_curve` (the cohort sampler, the
    truncation);
  * client-level discrete Gaussian: :func:`epsilon_discrete_gaussian_curve`
    (thesis Theorem 3, |K| the largest cohort);
  * record level (CDP-LQ): ``T_gd * P`` Poisson-subsampled Gaussian steps
    of rate ``record_rate``, P being the most rounds any client joined
    (cohorts are public and data-independent, so they give no
    amplification). Also reported: the bound for a client in every round
    and the one-step analytical-Gaussian epsilon (Balle and Wang 2018).

  Args:
    mechanism: The scheme's per-round mechanism.
    rounds_list: Round counts T.
    delta: Target delta.
    accountant: One of ``ACCOUNTANTS``.
    sampling: The run's sampling.

  Returns:
    A :class:`PrivacyReport`; no DP: epsilons None and no label.

  >>> sampling = Sampling(rate=1 / 60, sampler="poisson", num_clients=6000,
  ...                     capacity=128)
  >>> out = report(Mechanism("gaussian", 1.54), [100, 200], 1e-5, "moments", sampling)
  >>> [round(e, 2) for e in out.epsilons]
  [0.84, 1.0]
  >>> report(Mechanism("none"), [100, 200], 1e-5, "moments", sampling).epsilons
  [None, None]
  """
  rounds_list = list(rounds_list)
  sigma = mechanism.noise_multiplier
  if mechanism.kind == "none":
    return PrivacyReport([None] * len(rounds_list), None, {})
  if mechanism.level == "record":
    final = max(rounds_list)
    parts = sampling.participations(rounds_list + [final])
    steps = [mechanism.steps_per_round * p for p in parts]
    q = mechanism.record_rate
    curve = epsilon_curve(sigma, q, steps + [mechanism.steps_per_round * final], delta,
                          accountant, "poisson")
    step_eps = (analytic_gaussian.epsilon_for_sigma(sigma, delta) if sigma > 0
                else float("inf"))
    label = (f"record-level: {accountant_label(accountant, 'poisson')} "
             f"of records (q = |B|/|D_k| = {q:.4g}), composed over T_gd x the most "
             f"participations of any client ({steps[-1]} steps by round {final})")
    fields = {"dp_level": "record (sample-level, per participant's data)",
              "local_sampling_rate": q, "composed_steps": steps[-1],
              "max_participations": parts[-1], "epsilon_every_round": curve[-1],
              "epsilon_step_agm": step_eps}
    return PrivacyReport(curve[:len(rounds_list)], label, fields)
  if mechanism.kind == "discrete_gaussian":
    return _discrete_gaussian_report(mechanism, rounds_list, delta, accountant, sampling)
  if accountant == MONTE_CARLO:
    return _monte_carlo_report(mechanism, rounds_list, delta, sampling)
  if mechanism.correlation != "independent" or sampling.cycle_length > 1:
    return _correlated_report(mechanism, rounds_list, delta, accountant, sampling)
  eps = epsilon_curve(sigma, sampling.rate, rounds_list, delta, accountant,
                      sampling.sampler, num_clients=sampling.num_clients,
                      truncated_cohort=sampling.max_cohort)
  return PrivacyReport(eps, accountant_label(accountant, sampling.sampler,
                                             sampling.max_cohort), {})


def cyclic_epsilon_curve(noise_multiplier: float, sampling_rate: float, cycle_length: int,
                         rounds_list, delta: float, accountant: str = "rdp") -> list[float]:
  """Epsilon of T rounds of cyclic Poisson sampling over b groups, per T.

  Amplified banded matrix factorization (Choquette-Choo et al. 2023,
  "(Amplified) Banded Matrix Factorization", Thm 4; jax-privacy's
  ``DpsgdTrainingAccountant`` with ``cycle_length``): with at most b bands
  and column-normalized strategy, the run is as private as ceil(T / b)
  Poisson-subsampled Gaussian steps at rate min(1, b q) with noise
  multiplier sigma. b = 1 is :func:`epsilon_curve`.

  >>> a = cyclic_epsilon_curve(1.0, 0.01, 1, [100], 1e-5)
  >>> a == epsilon_curve(1.0, 0.01, [100], 1e-5, "rdp")
  True
  """
  steps, rate = _cyclic_steps(rounds_list, sampling_rate, cycle_length)
  return epsilon_curve(noise_multiplier, rate, steps, delta, accountant, "poisson")


def _cyclic_steps(rounds_list, sampling_rate: float, cycle_length: int
                  ) -> tuple[list[int], float]:
  """A client's rounds under cyclic Poisson sampling over b groups: ceil(T / b)
  per T, at rate min(1, b q)."""
  return ([-(-_check_rounds(t) // cycle_length) for t in rounds_list],
          min(1.0, sampling_rate * cycle_length))


def _discrete_gaussian_report(mechanism: Mechanism, rounds_list, delta: float,
                              accountant: str, sampling: Sampling) -> PrivacyReport:
  """Thesis Theorem 3 over the rounds a client can join: all T, or under
  cyclic Poisson sampling over b groups its group's ceil(T / b) rounds at
  rate min(1, b q) (the noise is independent across rounds, so a client's
  privacy loss composes over its own group's rounds only)."""
  sigma, cycle = mechanism.noise_multiplier, sampling.cycle_length
  steps, rate = _cyclic_steps(rounds_list, sampling.rate, cycle)
  eps = epsilon_discrete_gaussian_curve(
      sigma, rate, steps, delta, mechanism.dimension, sampling.capacity, accountant,
      sampling.sampler, num_clients=sampling.num_clients)
  label = discrete_gaussian_label(accountant, sampling.sampler, sigma, mechanism.dimension,
                                  sampling.capacity)
  if cycle == 1:
    return PrivacyReport(eps, label, {})
  label += (f", cyclic Poisson sampling over b = {cycle} groups: ceil(T/b) steps at rate "
            f"min(1, b q) = {rate:.4g}")
  return PrivacyReport(eps, label, {"cycle_length": cycle})


def _correlated_report(mechanism: Mechanism, rounds_list, delta: float, accountant: str,
                       sampling: Sampling) -> PrivacyReport:
  """Client-level Gaussian noise under cyclic sampling or correlated across rounds.

  Both accountings below assume Poisson sampling (within a group) with no
  cap on the cohort; other samplers are refused rather than accounted as
  Poisson."""
  sigma, cycle = mechanism.noise_multiplier, sampling.cycle_length
  if sampling.sampler != "poisson" or sampling.max_cohort is not None:
    what = (f"{sampling.sampler} sampling" if sampling.max_cohort is None else
            f"Poisson sampling truncated to {sampling.max_cohort} clients")
    raise ValueError(
        f"{mechanism.correlation} noise (cycle length {cycle}) is accounted for untruncated "
        f"(cyclic) Poisson sampling only, not {what}; account balls-in-bins and b-min-sep "
        "by 'monte-carlo'")
  if mechanism.correlation == "blt":
    # The noise is scaled to the strategy's (k, b)-min-sep sensitivity: the
    # whole run is one Gaussian release with noise multiplier sigma (exact
    # analytical Gaussian mechanism, Balle and Wang 2018); the Poisson
    # sampling within a group is not counted.
    eps = analytic_gaussian.epsilon_for_sigma(sigma, delta) if sigma > 0 else math.inf
    label = (f"BLT matrix factorization (McMahan et al. 2024): one Gaussian release, noise "
             f"multiplier {sigma:g} at the strategy's min-separation sensitivity (its "
             f"separation: the record's correlated_noise.min_separation, at most the b = "
             f"{cycle} groups of cyclic Poisson sampling), analytical Gaussian mechanism; "
             "sampling not amplified")
    return PrivacyReport([0.0 if t == 0 else eps for t in rounds_list], label,
                         {"noise_correlation": "blt", "cycle_length": cycle})
  eps = cyclic_epsilon_curve(sigma, sampling.rate, cycle, rounds_list, delta, accountant)
  label = (f"{accountant_label(accountant, 'poisson')}, cyclic Poisson sampling over "
           f"b = {cycle} groups: ceil(T/b) steps at rate min(1, b q) = "
           f"{min(1.0, sampling.rate * cycle):.4g} (amplified banded MF, Choquette-Choo et "
           f"al. 2023)")
  return PrivacyReport(eps, label, {"noise_correlation": mechanism.correlation,
                                    "cycle_length": cycle})


def participation(sampling: Sampling, rounds: int) -> monte_carlo.Participation:
  """The run's participation as Monte Carlo accounting sees it (Poisson is
  b-min-sep with b = 1).

  Raises:
    ValueError: A sampling it does not cover: cyclic Poisson (b > 1 groups)
      or a truncated cohort, which the draws would take for plain Poisson.
  """
  if sampling.cycle_length > 1 or sampling.max_cohort is not None:
    what = (f"cyclic Poisson sampling (b = {sampling.cycle_length})"
            if sampling.cycle_length > 1 else f"truncated cohorts (max {sampling.max_cohort})")
    raise ValueError(f"monte-carlo accounting does not cover {what}; use rdp or pld")
  if sampling.sampler == "poisson":
    return monte_carlo.Participation("b-min-sep", rounds, 1, sampling.rate)
  if sampling.sampler not in monte_carlo.PARTICIPATIONS:
    raise ValueError(f"monte-carlo accounting does not cover {sampling.sampler} sampling")
  return monte_carlo.Participation(sampling.sampler, rounds, sampling.separation,
                                   sampling.prob)


def _monte_carlo_report(mechanism: Mechanism, rounds_list, delta: float,
                        sampling: Sampling) -> PrivacyReport:
  """Client-level Gaussian noise (independent, or correlated by a Toeplitz
  strategy) under Poisson, balls-in-bins or b-min-sep participation: the
  whole run's Monte Carlo epsilon (``fedjax_dp.privacy.monte_carlo``),
  reported for every round count (the first t rounds' releases are a
  post-processing of all T, so the run's epsilon bounds theirs)."""
  if (mechanism.kind, mechanism.level) != ("gaussian", "client"):
    raise ValueError("monte-carlo accounting covers a client-level Gaussian mechanism only")
  rounds_list = list(rounds_list)
  final = max(rounds_list)
  part = participation(sampling, final)
  column = mechanism.strategy or (1.0,)
  samples, confidence, seed = sampling.monte_carlo
  sigma = mechanism.noise_multiplier
  found = (monte_carlo.estimate(part, column, sigma, delta, samples=samples,
                                confidence=confidence, seed=seed)
           if sigma > 0 else None)
  eps = math.inf if found is None else found.epsilon
  what = {"b-min-sep": f"b-min-sep sampling (b = {part.separation}, p = {part.prob:.4g})",
          "balls-in-bins": f"balls-in-bins sampling ({part.separation} bins)"}[part.kind]
  if sampling.sampler == "poisson":
    what = f"Poisson sampling (q = {part.prob:.4g})"
  label = (f"monte-carlo ({samples} draws of each direction, seed {seed}): an upper bound "
           f"on epsilon that holds with probability {confidence:g}, {what}, "
           f"{mechanism.correlation} noise ({len(column)}-entry Toeplitz column); the whole "
           f"run's epsilon for every round")
  fields = {"noise_correlation": mechanism.correlation, "participation": part.kind,
            "min_separation": part.separation, "participation_prob": part.prob}
  if found is not None:
    fields.update(found.fields())
  return PrivacyReport([0.0 if t == 0 else eps for t in rounds_list], label, fields)
