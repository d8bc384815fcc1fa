"""The canary audit of a client-level DP release, as a round feature.

The canaries, their statistics and the report are ``fedjax_dp.features.audit.canaries``
(Andrew et al. 2024's one-run audit); this module puts them in the round:
canary j is client N + j, joins a round with the sampling rate while it is
inserted (``cohort``, in slots after the cohort's), trains on nothing and
sends its direction at norm S (``messages``), is not counted among the
clipped real clients (``contributions``), and every released sum updates the
statistics (``observe``).
"""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_dp import keys, sampling
from fedjax_dp.features.audit import canaries
from fedjax_dp.features.audit.canaries import AuditConfig
from fedjax_dp.errors import ConfigError
from fedjax_dp.features.base import At, Conflict, Feature, RunView
from fedjax_dp.options import declared


class Audit(Feature):
  """Canary clients: ``RunConfig.of(audit=canaries.AuditConfig(k))``."""

  kind = "audit"
  config_type = canaries.AuditConfig
  title = "privacy audit (canary clients; fedjax_dp.features.audit, docs/privacy.md)"
  switch = "audit_canaries"
  options = declared(canaries.AuditConfig)
  conflicts = (Conflict("attack", "an attack: the audit assumes honest clients"),
               Conflict("max_cohort", "max_cohort (truncated Poisson sampling)"))
  key_purposes = (keys.Purpose("run", keys.AUDIT, "the canaries"),
                  keys.Purpose("round", keys.CANARY_SAMPLING, "the canaries joining a round"))

  @classmethod
  def check(cls, config: canaries.AuditConfig, run: RunView) -> None:
    """Canaries audit a client-level DP release: refused elsewhere (one line)."""
    config.validate(run.num_clients)
    if run.mechanism.kind == "none":
      raise ConfigError("audit_canaries", f"audits a DP release; {run.scheme_name} adds no "
                        "noise, so there is no epsilon to audit")
    if run.mechanism.level != "client":
      raise ConfigError("audit_canaries", f"audits client-level DP; {run.scheme_name}'s DP "
                        f"is {run.mechanism.level}-level")
    if run.sampler in sampling.SCHEDULED:
      raise ConfigError("audit_canaries", "canaries follow Poisson or cyclic Poisson "
                        f"sampling; a run under {run.sampler} sampling is not audited")
    super().check(config, run)

  def init(self):
    run = self.run
    state = canaries.init_state(run.run_key, run.num_kept, self.config)
    canaries.check_draw(state)
    return state, canaries.planned_capacity(run.run_key, state, run.rate, run.rounds,
                                            run.slot_multiple, self.cycle)

  @property
  def cycle(self) -> canaries.Cycle:
    """The cyclic sampling the canaries follow, as the run's clients."""
    return canaries.Cycle(self.run.cycle_length, self.run.num_clients)

  def cohort(self, at: At, cohort):
    """The canaries that join round t, in the feature's extra slots (ids N + j);
    under cyclic sampling those of round t's group only."""
    which, joined = canaries.canary_cohort(canaries.round_key(at.run_key, at.t),
                                           at.state.inserted, self.run.rate, at.slots,
                                           self.cycle, at.t)
    return cohort._replace(
        indices=jnp.concatenate([cohort.indices, self.run.num_clients + which]),
        mask=jnp.concatenate([cohort.mask, joined]))

  def messages(self, at: At, messages):
    n, chunk = self.run.num_clients, at.chunk
    is_canary = chunk.ids >= n
    sent = canaries.messages(at.state, jnp.where(is_canary, chunk.ids - n, 0),
                             at.noise.clip_norm, self.run.traits.fixed_sensitivity,
                             messages.dtype)
    return jnp.where(is_canary[:, None], sent, messages)

  def contributions(self, at: At, contributions):
    contributions, clipped = contributions
    if not self.run.traits.fixed_sensitivity:  # canaries are always clipped
      clipped = clipped - jnp.sum(at.chunk.mask & (at.chunk.ids >= self.run.num_clients))
    return contributions, clipped

  def observe(self, at: At, state):
    return canaries.observe(state, at.observed.total)

  def review(self, record: dict) -> dict:
    """``violation``: whether the decision's lower bound exceeds the reported
    ``epsilon_final`` (``canaries.violation``; None without an epsilon)."""
    return {"violation": canaries.violation(record)}

  def record(self, state, best: dict) -> dict:
    """The audit's figures beside the accountant's epsilon; both threat
    models' statistics cover every round, so they compare with
    ``epsilon_final``.

    ``empirical_epsilon*`` are estimates (Andrew et al. 2024, with a
    bootstrap interval in ``audit``), ``epsilon_lower_bound*`` lower bounds
    (Steinke et al. 2023); ``epsilon_lower_bound_decision`` is the largest of
    all lower bounds (ours and jax-privacy's, both threat models) at the
    audit's confidence jointly: the run violates its claim only when it
    exceeds ``epsilon_final`` (``canaries.violation(record)``)."""
    del best
    found = canaries.report(state, self.run.delta, self.config.confidence)
    return {"empirical_epsilon": found["final_model"]["empirical_epsilon"],
            "empirical_epsilon_every_round": found["every_round"]["empirical_epsilon"],
            "epsilon_lower_bound": found["final_model"]["epsilon_lower_bound"],
            "epsilon_lower_bound_every_round": found["every_round"]["epsilon_lower_bound"],
            "epsilon_lower_bound_decision": found["decision_lower_bound"],
            "audit": found}
