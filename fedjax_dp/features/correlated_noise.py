"""Correlated noise (DP-FTRL by matrix factorization) as a round feature.

``RunConfig.of(correlated_noise=CorrelatedNoiseConfig("banded", bands=4),
cycle_length=4)``: the clients clip their messages and add no noise share;
the server adds ``S sigma scale (C^{-1} z)_t`` to the round's sum, z_t fresh
from the round's ``keys.CORRELATED_NOISE`` key and the streaming inverse's
buffers in the feature's state (checkpointed with the server state).
``fedjax_dp.privacy.correlated`` builds the strategies (jax-privacy's banded
and BLT factorizations) and says what each promises; the participation it
needs, a client's rounds at least b apart, is cyclic Poisson sampling over
b groups (``Privacy.cycle_length``, ``fedjax_dp.sampling``), and the
accountant composes the mechanism that ran (``accounting.Mechanism.correlation``).

The noise is the server's (central DP: a server that adds it honestly, as
DP-FTRL in production); it sits on the same sum the compressed updates
form, so any client-level Gaussian scheme (FL-STD-DP, FL-TOP-DP, FL-CS-DP,
Fed-SMP) can take it. FL-SIGN-DP's discrete shares and CDP-LQ's local noise
cannot, and are refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import jax

from fedjax_dp import keys, options
from fedjax_dp.errors import ConfigError
from fedjax_dp.features.base import At, Conflict, Feature, Noise, RunView
from fedjax_dp.options import declared, setting
from fedjax_dp.privacy import accounting, correlated


@dataclasses.dataclass(frozen=True)
class CorrelatedNoiseConfig:
  """The noise's correlation across rounds.

  Attributes:
    noise: "independent" (today's fresh noise per round), "banded" or "blt"
      (``fedjax_dp.privacy.correlated``).
    bands: b, the bands of the banded strategy (at most the min-separation).
    min_separation: The fewest rounds between two participations of a client
      the strategy assumes; None: the sampler's cycle length. More than the
      cycle guarantees is refused.
  """

  noise: str = setting("independent", "noise across rounds: independent (fresh each round), "
                       "banded or blt (DP-FTRL by matrix factorization, jax-privacy; "
                       "docs/correlated-noise.md)", choices=correlated.KINDS)
  bands: int = setting(1, "bands of --noise banded (at most --cycle-length)",
                       options.positive_int)
  min_separation: int | None = setting(
      None, "rounds between two participations of a client the strategy assumes (default: "
      "--cycle-length, what cyclic sampling guarantees)", options.positive_int)

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    if self.noise not in correlated.KINDS:
      raise ConfigError("noise", f"must be one of {correlated.KINDS}, got {self.noise!r}")
    if self.noise != "banded" and self.bands != 1:
      raise ConfigError("bands", f"applies to --noise banded, not {self.noise}")


class Value(NamedTuple):
  """The round's noise vector (per unit of S sigma) and the stream's next state."""

  noise: jax.Array
  state: Any


class CorrelatedNoise(Feature):
  """Server-added noise correlated across rounds (see the module docstring)."""

  kind = "correlated_noise"
  config_type = CorrelatedNoiseConfig
  title = "correlated noise (DP-FTRL, banded and BLT matrix factorization; jax-privacy)"
  switch = "noise"
  options = declared(CorrelatedNoiseConfig)
  conflicts = (Conflict("secure_aggregation", "secure aggregation: the server adds the noise "
                        "after the sum"),
               Conflict("adaptive_clip", "adaptive_clip, whose count noise is independent"))
  key_purposes = (keys.Purpose("round", keys.CORRELATED_NOISE, "the server's z_t"),)

  @classmethod
  def from_options(cls, values: Mapping[str, Any]) -> CorrelatedNoiseConfig | None:
    """None for ``--noise independent`` (the default); --bands and
    --min-separation need banded or blt noise."""
    if values["noise"] == "independent":
      for name in ("bands", "min_separation"):
        option = next(o for o in cls.options if o.name == name)
        if values[name] != option.default:
          raise ConfigError(name, "needs --noise banded or --noise blt")
      return None
    return CorrelatedNoiseConfig(values["noise"], values["bands"], values["min_separation"])

  @classmethod
  def check(cls, config: CorrelatedNoiseConfig, run: RunView) -> None:
    """Refuses a scheme whose release is not a client-level Gaussian sum and a
    sampler that cannot guarantee the strategy's min-separation (one line)."""
    config.validate()
    mechanism = run.mechanism
    if (mechanism.kind, mechanism.level) != ("gaussian", "client"):
      what = ("adds no noise" if mechanism.kind == "none" else
              f"releases a {mechanism.level}-level {mechanism.kind.replace('_', ' ')} "
              "mechanism")
      raise ConfigError("noise", f"{config.noise} noise goes on a client-level Gaussian sum; "
                        f"{run.scheme_name} {what}")
    super().check(config, run)
    separation = cls.min_separation(config, run)
    if separation > run.cycle_length:
      raise ConfigError("min_separation", f"{separation} rounds between a client's "
                        f"participations are not what the sampler guarantees: --cycle-length "
                        f"{run.cycle_length} (cyclic Poisson sampling) keeps them "
                        f"{run.cycle_length} apart")
    if config.noise == "banded" and config.bands > separation:
      raise ConfigError("bands", f"{config.bands} bands need a client's participations at "
                        f"least {config.bands} rounds apart; the run keeps them {separation} "
                        f"apart (set --cycle-length {config.bands})")

  @classmethod
  def min_separation(cls, config: CorrelatedNoiseConfig, run: RunView) -> int:
    """The min-separation the strategy is built for."""
    return run.cycle_length if config.min_separation is None else config.min_separation

  @classmethod
  def mechanism(cls, config: CorrelatedNoiseConfig,
                mechanism: accounting.Mechanism) -> accounting.Mechanism:
    return mechanism._replace(correlation=config.noise)

  def __init__(self, config: CorrelatedNoiseConfig, run: RunView):
    super().__init__(config, run)
    self.strategy = correlated.make_strategy(config.noise, run.rounds, config.bands,
                                             self.min_separation(config, run))

  def init(self):
    return self.strategy.init(self.run.num_kept), 0

  def begin(self, at: At, value: None) -> Value:
    """Round t's ``scale (C^{-1} z)_t`` and the stream's next state, of the
    sum's length K (a compressed message's, ``RunView.num_kept``)."""
    del value
    key = keys.purpose(at.inputs.keys.round, keys.CORRELATED_NOISE)
    z = jax.random.normal(key, (self.run.num_kept,))
    return Value(*self.strategy.next(z, at.state))

  def noise(self, at: At, noise: Noise) -> Noise:
    """The clients add no share: the server adds the whole noise (:meth:`total`)."""
    del at
    return noise._replace(noise_multiplier=0.0)

  def total(self, at: At, total: jax.Array) -> jax.Array:
    return total + (self.run.clip_norm * self.run.noise_multiplier) * at.value.noise

  def observe(self, at: At, state):
    del state
    return at.value.state

  def record(self, state, best: dict) -> dict:
    del state, best
    strategy = self.strategy
    std = correlated.prefix_noise_std(strategy)
    return {"correlated_noise": {
        **dataclasses.asdict(self.config), "min_separation": strategy.min_separation,
        "strategy_bands_or_buffers": strategy.bands, "noise_scale": strategy.scale,
        "final_prefix_noise_std": float(std[-1]),
        "independent_prefix_noise_std": float(strategy.rounds ** 0.5)}}
