"""Client failures (thesis 5.2.5 / 5.3.3) as a round feature.

Each sampled client fails (sends nothing) with probability ``dropout_rate``,
after the cohort and the secure-aggregation masks are fixed (``failures``,
the round's ``keys.DROPOUT`` key). DP noise shares are sized for |K| - l
clients (``noise``), so the aggregate noise is at least S*sigma while at most
l = ``max_dropouts`` clients fail; the feature counts the failed clients and
the rounds that lost more than l (``observe``), which the record reports and
warns of (only where clients add the noise in shares: not CDP-LQ's
record-level noise, nor the server's correlated noise, which a failure does
not reduce). Every run has this feature (``fedjax_dp.features.build``): with no
failures it changes nothing, and the record always states its fields.

The aggregate noise's variance, S^2 sigma^2 (|K| - d) / (|K| - l), depends on
the realised cohort |K| when l > 0 or clients fail: under Poisson sampling,
where |K| is private, the accountant does not count what that reveals
(docs/privacy.md, "Client failures").
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp.errors import ConfigError
from fedjax_dp.features.base import At, Feature, Noise, RunView


class Counts(NamedTuple):
  """Failed clients and the rounds that lost more than l of them, so far."""

  dropped: jax.Array
  under_noised: jax.Array


def shares_noise(run: RunView) -> bool:
  """The clients add the noise in shares (thesis 5.2.5), so a failed
  client's share is missing from the sum. Not so for CDP-LQ, whose clients
  each add their own records' whole noise (record-level DP), nor under
  correlated noise, which the server adds whole: there a failure takes no
  noise away."""
  return (run.traits.dp and run.mechanism.level == "client"
          and "correlated_noise" not in run.kinds)


class Dropouts(Feature):
  """Failures: ``RunConfig.of(dropout_rate=..., max_dropouts=...)``."""

  kind = "dropouts"
  key_purposes = ()  # the round's keys.DROPOUT key is the core's (keys.RoundKeys)

  @property
  def shared_noise(self) -> bool:
    """:func:`shares_noise` of the run."""
    return shares_noise(self.run)

  @classmethod
  def check(cls, config: Any, run: RunView) -> None:
    """Refuses l >= |K| where the clients add the noise in shares: the
    shares would be sized for at most one client, each the whole noise."""
    super().check(config, run)
    tolerated, cohort = config.max_dropouts, run.clients_per_round
    if shares_noise(run) and tolerated >= cohort:
      raise ConfigError("max_dropouts", f"must be below |K| = {cohort}, the clients a round "
                        f"asks (noise shares are sized for |K| - l of them), got {tolerated}")

  @property
  def tolerated(self) -> int:
    """l: the failures the noise shares are sized for (0 without shares)."""
    return self.config.max_dropouts if self.shared_noise else 0

  def init(self):
    return Counts(jnp.int32(0), jnp.int32(0)), 0

  def begin(self, at: At, value: None) -> jax.Array | None:
    """(slots,) bool, the sampled slots whose client fails (None: no failures)."""
    del value
    if self.config.dropout_rate > 0:
      inputs = at.inputs
      mask = inputs.cohort.mask
      return mask & jax.random.bernoulli(inputs.keys.dropout, self.config.dropout_rate,
                                         mask.shape)
    return None

  def failures(self, at: At, failed: jax.Array) -> jax.Array:
    return failed if at.value is None else failed | at.value

  def noise(self, at: At, noise: Noise) -> Noise:
    del at
    # Thesis 5.2.5: shares sized so that any |K| - l of them carry S*sigma.
    return noise._replace(num_shares=noise.num_shares - self.tolerated)

  def observe(self, at: At, state: Counts) -> Counts:
    drops = self.info(at, {})["num_dropped"]
    return Counts(state.dropped + drops,
                  state.under_noised + (drops > self.tolerated).astype(jnp.int32))

  def info(self, at: At, info: dict) -> dict:
    value = at.value
    return {**info, "num_dropped": (jnp.int32(0) if value is None
                                    else jnp.sum(value, dtype=jnp.int32))}

  def record(self, state: Counts, best: dict) -> dict:
    del best
    under_noised = int(state.under_noised) if self.shared_noise else 0
    if under_noised:
      warnings.warn(f"{self.run.scheme_name}: {under_noised} rounds lost more than "
                    f"--max-dropouts {self.config.max_dropouts} clients; their aggregate "
                    "noise was below what the accountant assumes")
    return {"max_dropouts": self.tolerated, "dropout_rate": self.config.dropout_rate,
            "dropped_clients": int(state.dropped), "under_noised_rounds": under_noised}
