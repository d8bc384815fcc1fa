"""Canary clients: an empirical audit of the privacy a run delivers.

The reported epsilon rests on the accountant; a bug in clipping, noise
shares, secure aggregation or the server's divisor would go unseen. Canary
clients measure what a run actually releases (Andrew et al., ICLR 2024,
"One-shot Empirical Privacy Estimation for Federated Learning", Sec. 3-4):

* 2K candidate canaries are drawn, each a fixed random unit direction u_j
  in the scheme's *message* space (where its noise is added: the n weights
  of FL-STD-DP, the k kept values of FL-TOP-DP, the m DCT coefficients of
  FL-CS-DP, the n signs of FL-SIGN-DP). Each candidate is inserted with
  probability 1/2, independently (so about K are inserted and K held out:
  the one-run bound of Steinke et al. needs this coin).
* An inserted canary is a client with id N + j: every round it joins with
  probability q, independently (the Poisson sampling the accountant
  assumes, whatever sampler the real clients use; under cyclic Poisson
  sampling over b groups, ``Privacy.cycle_length``, it is in group
  (N + j) mod b as that client would be and joins its group's rounds, one
  in b, with probability b q: the participation the accountant of
  correlated noise assumes, at least b rounds apart), and sends u_j scaled to
  norm 10 S, which ``privatize`` clips to S; under FL-SIGN-DP it sends the
  sign vector of u_j (the scheme's fixed sensitivity). It adds its noise
  share and joins secure aggregation and dropouts like every client.
* Every round the server's released aggregate a_t (the noisy sum, before
  decoding) is correlated with every candidate: <u_j, a_t> for all 2K
  directions at the cost of one fast Walsh-Hadamard transform
  (``fedjax_dp.privacy.audit``). Two statistics are kept per candidate:
  ``sum_t <u_j, a_t>`` (threat model "final model": the adversary sees
  what the run's aggregates add up to, the model's delta in message space)
  and ``max_t cos(u_j, a_t)`` (threat model "every round": each round's
  aggregate is released).
* After the run, :func:`report` fits a Gaussian to the inserted and the
  held-out statistics and returns Andrew et al.'s ``empirical_epsilon`` at
  the run's delta with a bootstrap interval over the canaries (an
  *estimate*, biased upwards), the one-run lower bound of Steinke, Nasr and
  Jagielski (2023) at a stated confidence, and the figures of jax-privacy's
  ``CanaryScoreAuditor`` on the same statistics, each labelled a bound or
  an estimate. Only a lower bound above the reported epsilon proves a
  violation (:func:`violation`).

The honest clients' training, sampling and keys are those of the run
without canaries; the canaries add about qK clipped random directions to
every round's sum (and their noise shares: the aggregate noise stays
S sigma), which costs some accuracy when K q is not small against |K|.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import keys, options
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import setting
from fedjax_dp.privacy import audit as audit_stats

# A canary's message norm, in units of S: well above S, so that clipping
# brings it to S, and a run that skips clipping shows a tenfold signal.
CANARY_NORM = 10.0


# The fewest canaries K: every figure needs >= 2 inserted and >= 2 held-out
# candidates, which 2K >= 20 fair coins leave with probability 1 - 4e-5 (a
# draw that does not is refused before the run, ``check_draw``).
MIN_CANARIES = 10


@dataclasses.dataclass(frozen=True)
class AuditConfig:
  """The audit of one run.

  Attributes:
    canaries: K: 2K candidate directions, each inserted with probability
      1/2 (about K canary clients). Hundreds to thousands: the estimate's
      spread shrinks as 1/sqrt(K).
    confidence: Of the one-run lower bound.
  """

  canaries: int = setting(dataclasses.MISSING, "K: 2K canary directions, each inserted "
                          "as a client with probability 1/2; reports empirical_epsilon "
                          "beside epsilon (DP schemes; default 0: no audit)",
                          options.non_negative_int, name="audit_canaries")
  confidence: float = setting(0.95, "confidence of the audit's one-run lower bound",
                              options.number, name="audit_confidence")

  def validate(self, num_clients: int) -> None:
    """Raises ConfigError (one line, naming the field) for a bad setting."""
    if self.canaries < MIN_CANARIES:
      raise ConfigError("audit_canaries", f"must be >= {MIN_CANARIES} (every figure needs "
                        f"2 inserted and 2 held-out canaries), got {self.canaries}")
    if self.canaries > num_clients:
      raise ConfigError("audit_canaries", f"{self.canaries} exceeds the {num_clients} "
                        "clients: the canaries would outnumber the federation")
    if not 0.5 <= self.confidence < 1.0:
      raise ConfigError("audit_confidence", f"must be in [0.5, 1), got {self.confidence}")


class AuditState(NamedTuple):
  """The canaries and their statistics, carried (and checkpointed) with the
  server state.

  Attributes:
    rows: (2K,) the candidates' Hadamard rows (``audit_stats.CanaryBasis``).
    positions: (m,) where the message coordinates sit in the Hadamard space.
    signs: (m,) the random signs of the directions.
    inserted: (2K,) bool, the candidates that are clients.
    dot_sum: (2K,) sum over rounds of <u_j, a_t>.
    max_cos: (2K,) max over rounds of cos(u_j, a_t).
  """

  rows: jax.Array
  positions: jax.Array
  signs: jax.Array
  inserted: jax.Array
  dot_sum: jax.Array
  max_cos: jax.Array

  def basis(self) -> audit_stats.CanaryBasis:
    """The candidates' directions (their sizes follow from the array shapes)."""
    return audit_stats.CanaryBasis(self.rows, self.positions, self.signs)


def init_state(run_key: jax.Array, num_values: int, config: AuditConfig) -> AuditState:
  """The candidates of a run: directions and the inserted coin (``keys.AUDIT``)."""
  key = keys.purpose(run_key, keys.AUDIT)
  basis_key, coin_key = jax.random.split(key)
  candidates = 2 * config.canaries
  basis = audit_stats.canary_basis(basis_key, num_values, candidates)
  inserted = jax.random.bernoulli(coin_key, 0.5, (candidates,))
  zeros = jnp.zeros((candidates,), jnp.float32)
  return AuditState(basis.rows, basis.positions, basis.signs, inserted, zeros,
                    jnp.full((candidates,), -jnp.inf, jnp.float32))


def check_draw(state: AuditState) -> None:
  """Refuses, before the run, a draw of fewer than 2 inserted or 2 held-out
  candidates, which no figure of :func:`report` can use (one line)."""
  inserted = int(np.sum(np.asarray(state.inserted)))
  held_out = int(np.asarray(state.inserted).size) - inserted
  if min(inserted, held_out) < 2:
    raise ConfigError("audit_canaries", f"the run's draw inserted {inserted} of the "
                      f"{inserted + held_out} candidates and held {held_out} out; every "
                      "figure needs >= 2 of each (take more canaries, or another seed)")


class Cycle(NamedTuple):
  """Cyclic Poisson sampling as the canaries follow it (``fedjax_dp.sampling``).

  Attributes:
    length: b, the groups (1: plain Poisson sampling, every round).
    first_id: The first canary's client id, N: candidate j is in group
      (N + j) mod b, as client N + j would be.
  """

  length: int = 1
  first_id: int = 0


def _joining(key: jax.Array, inserted: jax.Array, rate: float, cycle: Cycle,
             t: jax.Array | int) -> tuple[jax.Array, jax.Array]:
  """(the candidates' uniform draws, which inserted ones join round t): with
  probability q every round, or under a cycle of b > 1 with probability b q
  in their group's rounds only (``sampling.sample_cohort``'s rule)."""
  u = jax.random.uniform(key, inserted.shape)
  if cycle.length > 1:
    ids = cycle.first_id + jnp.arange(inserted.shape[0])
    u = jnp.where(ids % cycle.length == (t - 1) % cycle.length, u, 2.0)
    rate = min(1.0, rate * cycle.length)
  return u, inserted & (u < rate)


def canary_cohort(key: jax.Array, inserted: jax.Array, rate: float, capacity: int,
                  cycle: Cycle = Cycle(), t: jax.Array | int = 1
                  ) -> tuple[jax.Array, jax.Array]:
  """Round t's canaries: each inserted one joins with probability ``rate``
  (under a cycle of b groups: b ``rate`` in its group's rounds only).

  Returns:
    ``(candidates, mask)``: (capacity,) candidate indices, the joined ones
    first, and which slots are real.
  """
  u, joined = _joining(key, inserted, rate, cycle, t)
  kept = min(capacity, inserted.shape[0])  # slots beyond the candidates: padding
  _, order = jax.lax.top_k(jnp.where(joined, -u, -2.0 - u), kept)
  pad = (0, capacity - kept)
  return jnp.pad(order.astype(jnp.int32), pad), jnp.pad(joined[order], pad)


def planned_capacity(run_key: jax.Array, state: AuditState, rate: float, rounds: int,
                     multiple: int, cycle: Cycle = Cycle()) -> int:
  """Canary slots holding every round's canaries (rounded up to ``multiple``)."""
  counts = jax.vmap(lambda t: jnp.sum(
      _joining(round_key(run_key, t), state.inserted, rate, cycle, t)[1]))(
          jnp.arange(1, rounds + 1))
  largest = max(1, int(np.max(np.asarray(counts))))
  return -(-largest // multiple) * multiple


def round_key(run_key: jax.Array, t: jax.Array | int) -> jax.Array:
  """The key of round t's canary sampling (``keys.CANARY_SAMPLING``)."""
  return keys.purpose(keys.round_key(run_key, t), keys.CANARY_SAMPLING)


def messages(state: AuditState, candidates: jax.Array, clip_norm: float,
             signs_only: bool, dtype) -> jax.Array:
  """(slots, m) what the canaries at these slots send.

  ``signs_only``: the sign vector of u_j (schemes whose sensitivity is fixed
  by construction, FL-SIGN-DP); otherwise u_j at norm ``CANARY_NORM * S``.
  """
  basis = state.basis()
  if signs_only:
    return audit_stats.canary_signs(basis, candidates).astype(dtype)
  return (CANARY_NORM * clip_norm * audit_stats.canary_directions(basis, candidates)
          ).astype(dtype)


def observe(state: AuditState, aggregate: jax.Array) -> AuditState:
  """The statistics after one more released aggregate (the noisy sum)."""
  released = aggregate.astype(jnp.float32)
  dots = audit_stats.canary_dots(state.basis(), released)
  norm = jnp.maximum(jnp.linalg.norm(released), 1e-30)
  return state._replace(dot_sum=state.dot_sum + dots,
                        max_cos=jnp.maximum(state.max_cos, dots / norm))


THREAT_MODELS = {"final_model": "dot_sum", "every_round": "max_cos"}


def report(state: AuditState, delta: float, confidence: float,
           reported_epsilon: float | None = None) -> dict:
  """The audit's record: per threat model, every figure labelled a bound or an
  estimate (``fedjax_dp.privacy.audit.audit_figures``), and the lower bound
  that decides a violation.

  Per threat model: Andrew et al.'s (ICLR 2024) ``empirical_epsilon``, an
  *estimate* (biased upwards), with a bootstrap interval over the canaries;
  the one-run lower bound of Steinke, Nasr and Jagielski (NeurIPS 2023),
  ``epsilon_lower_bound``; and jax-privacy's ``CanaryScoreAuditor`` fed the
  same statistics (its Clopper-Pearson and one-run figures are lower
  bounds, its Gaussian-DP figure an estimate). A violation is claimed only
  when a lower bound exceeds the reported epsilon: ``decision_lower_bound``
  is the largest of all the bounds of both threat models, each computed at
  a Bonferroni-corrected confidence so that the largest holds at
  ``confidence`` (``audit.decision_lower_bound``).

  Args:
    state: The audit's state after the run.
    delta: The run's delta.
    confidence: Of the bounds, the intervals and the decision.
    reported_epsilon: The accountant's epsilon to check (e.g. the record's
      ``epsilon_final``); None: ``violation`` is not decided here (see
      :func:`violation`).

  Returns:
    ``{"canaries", "inserted", "held_out", "confidence", "final_model":
    {...}, "every_round": {...}, "decision_lower_bound", "decision",
    "violation_rule"}`` (and ``"violation"`` when ``reported_epsilon`` is
    given), each threat model with ``empirical_epsilon``,
    ``empirical_epsilon_interval``, ``epsilon_lower_bound``, the guesses
    behind it, the two samples' means and standard deviations, and
    ``figures``: ``{name: {"value", "kind", "method", "confidence", ...}}``
    (kinds: ``privacy.audit.FIGURE_KINDS``).
  """
  inserted = np.asarray(state.inserted)
  out = {"canaries": int(inserted.size), "inserted": int(inserted.sum()),
         "held_out": int((~inserted).sum()), "confidence": confidence}
  samples = {}
  for name, field in THREAT_MODELS.items():
    stat = np.asarray(getattr(state, field), np.float64)
    samples[name] = (stat, inserted)
    inside, outside = stat[inserted], stat[~inserted]
    figures = audit_stats.audit_figures(stat, inserted, delta, confidence)
    estimate, bound = figures["empirical_epsilon"], figures["epsilon_lower_bound"]
    out[name] = {
        "empirical_epsilon": _finite(estimate["value"]),
        "empirical_epsilon_interval": estimate["interval"],
        "epsilon_lower_bound": _finite(bound["value"]),
        "guesses": bound["guesses"], "correct": bound["correct"],
        "inserted_mean": float(inside.mean()), "inserted_std": float(inside.std(ddof=1)),
        "held_out_mean": float(outside.mean()), "held_out_std": float(outside.std(ddof=1)),
        "figures": figures,
    }
  decision = audit_stats.decision_lower_bound(samples, delta, confidence)
  out["decision_lower_bound"] = decision["value"]
  out["decision"] = decision
  out["violation_rule"] = VIOLATION_RULE
  if reported_epsilon is not None:
    out["violation"] = bool(decision["value"] > reported_epsilon)
  return out


VIOLATION_RULE = ("a violation is claimed only when decision_lower_bound (the largest lower "
                  "bound, jointly at the audit's confidence) exceeds the reported epsilon "
                  "(epsilon_final); estimates and their intervals never decide")


def violation(record: dict) -> bool | None:
  """Whether an audited run's record proves its accountant's epsilon wrong.

  True only when a lower bound exceeds the reported epsilon:
  ``record["epsilon_lower_bound_decision"] > record["epsilon_final"]`` (at
  the audit's confidence; see :func:`report`). Estimates never decide.

  Args:
    record: A run's record (``simulation.run``) with an audit.

  Returns:
    The verdict; None for a record without an audit or without an epsilon.
  """
  bound = record.get("epsilon_lower_bound_decision")
  if bound is None:
    audit = record.get("audit") or {}
    bound = audit.get("decision_lower_bound")
  eps = record.get("epsilon_final")
  if bound is None or eps is None:
    return None
  return bool(bound > eps)


def _finite(value: float) -> float:
  return float(value) if math.isfinite(value) else audit_stats.EPS_CAP
