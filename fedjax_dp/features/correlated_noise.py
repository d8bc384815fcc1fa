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
    bands: b, the bands of the banded strategy (at most the min-separation
      the sampling guarantees, ``Privacy.min_separation``; any number under
      balls-in-bins).
  """

  noise: str = setting("independent", "noise across rounds: independent (fresh each round), "
                       "banded or blt (DP-FTRL by matrix factorization, jax-privacy; "
                       "docs/correlated-noise.md)", choices=correlated.KINDS)
  bands: int = setting(1, "bands of --noise banded (at most --min-separation, the rounds "
                       "the sampling keeps between a client's participations)",
                       options.positive_int)

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
               Conflict("adaptive_clip", "adaptive_clip, whose count noise is independent"),
               Conflict("max_cohort", "--max-cohort, whose truncated-Poisson accounting "
                        "holds for independent noise only"))
  key_purposes = (keys.Purpose("round", keys.CORRELATED_NOISE, "the server's z_t"),)

  @classmethod
  def from_options(cls, values: Mapping[str, Any]) -> CorrelatedNoiseConfig | None:
    """None for ``--noise independent`` (the default); --bands needs banded noise."""
    if values["noise"] == "independent":
      option = next(o for o in cls.options if o.name == "bands")
      if values["bands"] != option.default:
        raise ConfigError("bands", "needs --noise banded")
      return None
    return CorrelatedNoiseConfig(values["noise"], values["bands"])

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
      fix = ("; run a DP scheme (--schemes FL-TOP-DP, or any other -DP scheme)"
             if mechanism.kind == "none" else "")
      raise ConfigError("noise", f"{config.noise} noise goes on a client-level Gaussian sum; "
                        f"{run.scheme_name} {what}{fix}")
    super().check(config, run)
    if not run.traits.fixed_positions and run.num_kept < run.num_params:
      raise ConfigError("noise", f"{config.noise} noise cancels across rounds only where a "
                        "message value stands for the same weights every round; "
                        f"{run.scheme_name} draws its mask anew each round (run a scheme of "
                        "a fixed subset, e.g. FL-TOP-DP, FL-BAS-4-DP, or r = 1)")
    if run.sampler == "fixed":
      raise ConfigError("noise", f"{config.noise} noise is accounted for Poisson (cyclic), "
                        "b-min-sep or balls-in-bins sampling, not fixed-size cohorts: use "
                        "--sampling poisson")
    separation = run.min_separation
    if config.noise == "banded" and config.bands > separation and run.sampler != "balls-in-bins":
      if run.sampler == "b-min-sep":
        fix = f"set --min-separation {config.bands}"
      elif run.accountant == accounting.MONTE_CARLO:  # which accounts no cycle
        fix = f"use --sampling b-min-sep --min-separation {config.bands}"
      else:
        fix = f"set --cycle-length {config.bands}"
      raise ConfigError("bands", f"{config.bands} bands need a client's participations at "
                        f"least {config.bands} rounds apart; the run keeps them {separation} "
                        f"apart ({fix})")
    if config.noise == "blt" and run.sampler == "b-min-sep":
      raise ConfigError("noise", "blt noise's column has T entries; b-min-sep accounting "
                        "needs at most b: use --sampling balls-in-bins (or --noise banded)")
    if config.noise == "blt" and separation < 2:
      raise ConfigError("noise", "blt noise is built for a client's rounds at least 2 "
                        "apart; this run keeps them 1 apart, where the strategy holds no "
                        "buffer: give --cycle-length B (cyclic Poisson) or --sampling "
                        "balls-in-bins --accountant monte-carlo")

  @classmethod
  def mechanism(cls, config: CorrelatedNoiseConfig,
                mechanism: accounting.Mechanism) -> accounting.Mechanism:
    return mechanism._replace(correlation=config.noise)

  def __init__(self, config: CorrelatedNoiseConfig, run: RunView):
    super().__init__(config, run)
    self.strategy = correlated.make_strategy(
        config.noise, run.rounds, config.bands, run.min_separation,
        toeplitz=run.accountant == accounting.MONTE_CARLO)

  def accounted(self, mechanism: accounting.Mechanism) -> accounting.Mechanism:
    """The release with a Toeplitz strategy's first column (what Monte Carlo
    accounting reads); unchanged for the column-normalized banded one."""
    if not self.strategy.toeplitz:
      return mechanism
    return mechanism._replace(strategy=tuple(float(v) for v in self.strategy.column))

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
        "toeplitz": strategy.toeplitz,
        "strategy_bands_or_buffers": strategy.bands, "noise_scale": strategy.scale,
        "final_prefix_noise_std": float(std[-1]),
        "independent_prefix_noise_std": float(strategy.rounds ** 0.5)}}
