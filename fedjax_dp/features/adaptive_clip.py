"""Adaptive clipping (Andrew et al., NeurIPS 2021) as a round feature.

Each round, every client that sends reports whether its update fitted in the
round's clip norm, b_i = 1[||Delta_i|| <= C_t] (``tally``, summed with the
updates). The server releases the count with Gaussian noise of std sigma_b
and moves C geometrically towards the target quantile gamma of the update
norms (Andrew et al. Alg. 1, ``observe``):

  b_t = (sum_i b_i + N(0, sigma_b^2)) / m,   C_{t+1} = C_t exp(-eta_C (b_t - gamma)),

with m the expected cohort size. The count's noise is paid for out of the
run's sigma (their Theorem 1): the updates are noised with the multiplier

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

from fedjax_dp import keys
from fedjax_dp.errors import ConfigError
from fedjax_dp.features.base import Chunk, Feature, Noise


@dataclasses.dataclass(frozen=True)
class AdaptiveClipConfig:
  """Adaptive clipping's settings (Andrew et al. 2021, Sec. 3).

  Attributes:
    target_quantile: gamma, the share of updates the clip norm should fit.
    clip_lr: eta_C, the geometric step of the clip norm.
    count_noise: sigma_b, the std of the noise on the count; None: m / 20
      (the paper's choice), m the expected cohort size.
  """

  target_quantile: float = 0.5
  clip_lr: float = 0.2
  count_noise: float | None = None

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


class State(NamedTuple):
  """The next round's clip norm is S exp(``log_factor``) (S: the run's)."""

  log_factor: jax.Array


class AdaptiveClip(Feature):
  """Quantile-tracked clip norm: ``RunConfig.of(adaptive_clip=AdaptiveClipConfig())``."""

  kind = "adaptive_clip"

  @property
  def count_noise(self) -> float:
    """sigma_b (0 without DP noise: nothing to hide the count behind)."""
    if self.ctx.config.privacy.noise_multiplier == 0:
      return 0.0
    given = self.config.count_noise
    return given if given is not None else self.ctx.config.training.clients_per_round / 20

  @property
  def update_noise(self) -> float:
    """z_Delta, the updates' noise multiplier."""
    return update_noise_multiplier(self.ctx.config.privacy.noise_multiplier, self.count_noise)

  def validate(self) -> None:
    ctx = self.ctx
    self.config.validate()
    name, mechanism = ctx.scheme.name, ctx.mechanism
    if not (ctx.scheme.traits.dp and mechanism.kind == "gaussian"
            and mechanism.level == "client") or ctx.scheme.traits.fixed_sensitivity:
      raise ConfigError("adaptive_clip", f"tracks the clip norm of a client-level Gaussian "
                        f"release of clipped updates; {name} has none")
    if ctx.config.secure.secure_aggregation:
      raise ConfigError("adaptive_clip", "cannot be combined with secure aggregation, whose "
                        "modulus is sized for a fixed S")
    if ctx.config.feature("audit") is not None:
      raise ConfigError("adaptive_clip", "cannot be combined with audit_canaries, whose "
                        "canaries are sized for a fixed S")
    if not math.isfinite(self.update_noise):
      raise ConfigError("count_noise", f"{self.count_noise} leaves no noise for the updates: "
                        f"2 count_noise must exceed noise_multiplier "
                        f"{ctx.config.privacy.noise_multiplier}")

  def init(self, ctx):
    del ctx
    return State(jnp.float32(0.0)), 0

  def clip_norm(self, state: State) -> jax.Array:
    """C_t = S exp(log_factor)."""
    return self.ctx.clip_norm * jnp.exp(state.log_factor)

  def begin(self, state: State, inputs) -> jax.Array:
    del inputs
    return self.clip_norm(state)

  def noise(self, state: State, noise: Noise) -> Noise:
    return noise._replace(clip_norm=self.clip_norm(state), noise_multiplier=self.update_noise)

  def tally(self, state: State, chunk: Chunk, messages: jax.Array, noise: Noise) -> jax.Array:
    del state
    norms = jnp.linalg.norm(messages.astype(jnp.float32), axis=1)
    return jnp.sum(chunk.present & (norms <= noise.clip_norm), dtype=jnp.float32)

  def observe(self, state: State, value, observed) -> State:
    del value
    key = keys.purpose(observed.round_key, keys.ADAPTIVE_CLIP)
    m = self.ctx.config.training.clients_per_round
    fitted = (observed.tally + self.count_noise * jax.random.normal(key)) / m
    return State(state.log_factor - self.config.clip_lr * (fitted - self.config.target_quantile))

  def info(self, value: jax.Array) -> dict:
    return {"clip_norm": value}

  def entry(self, labels, predictions, infos: dict) -> dict:
    del labels, predictions
    return {"clip_norm": float(np.asarray(infos["clip_norm"])[-1])}

  def record(self, state: State, best: dict) -> dict:
    return {"adaptive_clip": {**dataclasses.asdict(self.config),
                              "count_noise": self.count_noise,
                              "update_noise_multiplier": self.update_noise,
                              "clip_norm_at_best": best["clip_norm"],
                              "final_clip_norm": float(self.clip_norm(state))}}
