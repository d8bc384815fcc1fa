"""Adaptive clipping (Andrew et al., NeurIPS 2021) as a round feature.

Each round, every client that sends reports whether its update fitted in the
round's clip norm, centred: b_i - 1/2 with b_i = 1[||Delta_i|| <= C_t]
(``tally``, summed with the updates). The server releases the sum with
Gaussian noise of std sigma_b and moves C geometrically towards the target
quantile gamma of the update norms (Andrew et al. Alg. 1, ``observe``):

  b_t = (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2,
  C_{t+1} = C_t exp(-eta_C (b_t - gamma)),

with m the expected cohort size (public; TF-Privacy's quantile estimator
does the same). Centring is what gives the count sensitivity 1/2: a raw
sum of b_i moves by 1 when a client joins, and adding m/2 back after the
noise (not |K|/2) keeps the cohort's size out of the release. The count's
noise is paid for out of the run's sigma (their Theorem 1): the updates are
noised with the multiplier

  z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2),

so that the pair (updates, count) is one Gaussian mechanism of noise
multiplier z = ``noise_multiplier`` (b_i - 1/2 has sensitivity 1/2), which
the accountant composes as for a fixed clip norm: the reported epsilon holds
unchanged. C_1 is the run's S (given or calibrated); the state is log(C_t / S). Defaults are the
paper's: gamma = 0.5, eta_C = 0.2, sigma_b = m / 20.
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
from fedjax_dp.features.base import At, Conflict, Feature, Noise, RunView
from fedjax_dp.options import Option, declared, setting


@dataclasses.dataclass(frozen=True)
class AdaptiveClipConfig:
  """Adaptive clipping's settings (Andrew et al. 2021, Sec. 3).

  Attributes:
    target_quantile: gamma, the share of updates the clip norm should fit.
    clip_lr: eta_C, the geometric step of the clip norm.
    count_noise: sigma_b, the std of the noise on the count; None: m / 20
      (the paper's choice), m the expected cohort size.
  """

  target_quantile: float = setting(0.5, "gamma, the share of updates the clip norm should "
                                   "fit", options.number, name="clip_quantile")
  clip_lr: float = setting(0.2, "eta_C, the clip norm's geometric step", options.number)
  count_noise: float | None = setting(
      None, "sigma_b, the noise std on the count of updates that fitted (default: clients "
      "per round / 20)", options.number, name="clip_count_noise")

  def validate(self) -> None:
    """Raises ConfigError naming the field."""
    if not 0.0 <= self.target_quantile <= 1.0:
      raise ConfigError("target_quantile", f"must be in [0, 1], got {self.target_quantile}")
    if not self.clip_lr > 0:
      raise ConfigError("clip_lr", f"must be > 0, got {self.clip_lr}")
    if self.count_noise is not None and not self.count_noise > 0:
      raise ConfigError("count_noise", f"must be > 0, got {self.count_noise}")


def update_noise_multiplier(noise_multiplier: float, count_noise: float) -> float:
  """z_Delta such that (updates at z_Delta, count at sigma_b) is one Gaussian
  mechanism of multiplier z (Andrew et al. Theorem 1); inf if 2 sigma_b <= z."""
  if noise_multiplier == 0:
    return 0.0
  rest = noise_multiplier ** -2 - (2 * count_noise) ** -2
  return math.inf if rest <= 0 else rest ** -0.5


def count_noise(config: AdaptiveClipConfig, run: RunView) -> float:
  """sigma_b: the config's, else m / 20 (the paper's); 0 without DP noise
  (nothing to hide the count behind)."""
  if run.noise_multiplier == 0:
    return 0.0
  return config.count_noise if config.count_noise is not None else run.clients_per_round / 20


class State(NamedTuple):
  """The next round's clip norm is S exp(``log_factor``) (S: the run's)."""

  log_factor: jax.Array


class AdaptiveClip(Feature):
  """Quantile-tracked clip norm: ``RunConfig.of(adaptive_clip=AdaptiveClipConfig())``."""

  kind = "adaptive_clip"
  config_type = AdaptiveClipConfig
  title = "adaptive clipping (Andrew et al. 2021; fedjax_dp.features.adaptive_clip, docs/api.md)"
  switch = "adaptive_clip"
  options = (Option("adaptive_clip", bool, False,
                    "track a quantile of the update norms with the clip norm, starting from "
                    "S; the count's noise is paid out of sigma, epsilon unchanged "
                    "(client-level Gaussian DP schemes)"),
             *declared(AdaptiveClipConfig))
  conflicts = (Conflict("secure_aggregation", "secure aggregation, whose modulus is sized "
                        "for a fixed S"),
               Conflict("audit", "audit_canaries, whose canaries are sized for a fixed S"))
  key_purposes = (keys.Purpose("round", keys.ADAPTIVE_CLIP, "adaptive clipping's count noise"),)

  @property
  def count_noise(self) -> float:
    """sigma_b (:func:`count_noise`)."""
    return count_noise(self.config, self.run)

  @property
  def update_noise(self) -> float:
    """z_Delta, the updates' noise multiplier."""
    return update_noise_multiplier(self.run.noise_multiplier, self.count_noise)

  @classmethod
  def check(cls, config: AdaptiveClipConfig, run: RunView) -> None:
    config.validate()
    name, mechanism = run.scheme_name, run.mechanism
    if not (run.traits.dp and mechanism.kind == "gaussian"
            and mechanism.level == "client") or run.traits.fixed_sensitivity:
      raise ConfigError("adaptive_clip", f"tracks the clip norm of a client-level Gaussian "
                        f"release of clipped updates; {name} has none")
    super().check(config, run)
    sigma_b = count_noise(config, run)
    if run.sigma_pending:  # checked at the calibrated sigma
      return
    if not math.isfinite(update_noise_multiplier(run.noise_multiplier, sigma_b)):
      raise ConfigError("count_noise", f"{sigma_b} leaves no noise for the updates: "
                        f"2 count_noise must exceed noise_multiplier {run.noise_multiplier:g}")

  def init(self):
    return State(jnp.float32(0.0)), 0

  def clip_norm(self, state: State) -> jax.Array:
    """C_t = S exp(log_factor)."""
    return self.run.clip_norm * jnp.exp(state.log_factor)

  def begin(self, at: At, value: None) -> jax.Array:
    """The round's C_t."""
    del value
    return self.clip_norm(at.state)

  def noise(self, at: At, noise: Noise) -> Noise:
    return noise._replace(clip_norm=self.clip_norm(at.state),
                          noise_multiplier=self.update_noise)

  def tally(self, at: At, tally: None) -> jax.Array:
    """sum (b_i - 1/2) over the chunk's present clients (sensitivity 1/2)."""
    del tally
    norms = jnp.linalg.norm(at.messages.astype(jnp.float32), axis=1)
    centred = (norms <= at.noise.clip_norm).astype(jnp.float32) - 0.5
    return jnp.sum(jnp.where(at.chunk.present, centred, 0.0))

  def observe(self, at: At, state: State) -> State:
    observed = at.observed
    key = keys.purpose(observed.round_key, keys.ADAPTIVE_CLIP)
    # The expected count of clients that report (the paper's m, public):
    # dividing by the cohort m while a share p fails would read
    # 1/2 + (1 - p)(F - 1/2) for the fraction F that fits.
    m = self.run.clients_per_round * (1.0 - self.run.dropout_rate)
    fitted = (observed.tally + self.count_noise * jax.random.normal(key)) / m + 0.5
    return State(state.log_factor - self.config.clip_lr * (fitted - self.config.target_quantile))

  def info(self, at: At, info: dict) -> dict:
    return {**info, "clip_norm": at.value}

  def entry(self, labels, predictions, infos: dict) -> dict:
    del labels, predictions
    return {"clip_norm": float(np.asarray(infos["clip_norm"])[-1])}

  def record(self, state: State, best: dict) -> dict:
    return {"adaptive_clip": {**dataclasses.asdict(self.config),
                              "count_noise": self.count_noise,
                              "update_noise_multiplier": self.update_noise,
                              "clip_norm_at_best": best["clip_norm"],
                              "final_clip_norm": float(self.clip_norm(state))}}
