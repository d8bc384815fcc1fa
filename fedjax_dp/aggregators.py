"""Robust aggregators: the server's rule for combining the cohort's updates.

Thesis Sec. 3.3.2 (l.611-619) lists defences against malicious clients that
replace the mean of the updates by a statistic less sensitive to a few
extreme ones; the thesis evaluates none of them. Each needs the individual
updates, so none can run under secure aggregation (thesis l.621), and none
keeps the DP guarantee of a noisy sum (each client's noise share is sized
for a sum: a median or a per-client bound changes the aggregate's noise),
so the round refuses both combinations (``simulation.setup.validate``).

Every aggregator maps the (slots, n) updates and a (slots,) mask of the
slots that hold a present client to an (n,) estimate of their mean:

* ``mean``: the plain average (the round's default path, a streamed sum);
* ``median``: the coordinate-wise median (Yin et al. 2018), the mean of the
  two middle values for an even count;
* ``trimmed-mean``: the coordinate-wise mean after dropping the
  ``floor(beta * count)`` largest and smallest values (Yin et al. 2018);
* ``norm-bound``: every update scaled to L2 norm at most M, then averaged
  (Sun et al. 2019, "Can you really backdoor federated learning?").

Padding slots (mask False) never enter a statistic. All functions are pure
and jittable; the count of present slots is traced, not static. A present
update with NaN or infinite entries (a client whose local training
diverged, or an attacker sending them) is an extreme value: the median and
the trimmed mean order NaN above every number and discard it like any
outlier, within their breakdown point (fewer than half such updates for the
median, at most ``floor(beta * count)`` for the trimmed mean); the norm
bound replaces it by zeros; the mean, which no outlier leaves intact,
becomes NaN.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import options
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import setting

from fedjax_dp.privacy.clipping import clip_by_l2_norm

AGGREGATORS = ("mean", "median", "trimmed-mean", "norm-bound")


@dataclasses.dataclass(frozen=True)
class AggregatorConfig:
  """The server's aggregation rule.

  Attributes:
    name: One of ``AGGREGATORS``.
    trim: beta for ``trimmed-mean``: the fraction dropped at each end, in
      [0, 0.5).
    norm_bound: M for ``norm-bound`` (> 0).
  """

  name: str = setting("mean", "the server's rule over the cohort's updates: mean, or a "
                      "robust one needing the individual updates (median, trimmed-mean, "
                      "norm-bound; thesis Sec. 3.3.2), refused with secure aggregation and "
                      "with DP schemes", name="aggregator", choices=AGGREGATORS)
  trim: float = setting(0.1, "trimmed-mean: fraction of values dropped at each end, in "
                        "[0, 0.5)", options.number, name="trim_fraction")
  norm_bound: float | None = setting(None, "norm-bound: every update scaled to L2 norm at "
                                     "most this", options.number)

  def validate(self) -> None:
    """Raises ConfigError (one line, naming the field) for a bad setting."""
    if self.name not in AGGREGATORS:
      raise ConfigError("aggregator", f"{self.name!r} is unknown; choose one of "
                        f"{', '.join(AGGREGATORS)}")
    if not 0.0 <= self.trim < 0.5:
      raise ConfigError("trim", f"must be in [0, 0.5), got {self.trim}")
    if self.name == "norm-bound" and not (self.norm_bound is not None
                                          and self.norm_bound > 0):
      raise ConfigError("norm_bound", f"must be > 0 for aggregator norm-bound, "
                        f"got {self.norm_bound}")

  @property
  def robust(self) -> bool:
    """Whether the rule needs the individual updates (everything but the mean)."""
    return self.name != "mean"


TITLE = "aggregation (robust rules against malicious clients; fedjax_dp.aggregators)"


# The rule that reads each of the rules' own settings.
_READ_BY = {"trim": "trimmed-mean", "norm_bound": "norm-bound"}


def from_options(values) -> AggregatorConfig | None:
  """The rule of the options' values (``values``: by option name, as
  ``options.declared(AggregatorConfig)`` names them); None for the mean (the
  round's streamed sum).

  Raises:
    ConfigError: A rule's own setting given (not at its default) for
      another rule, which would ignore it (one line, naming it).
  """
  name = values["aggregator"]
  for option in options.declared(AggregatorConfig):
    rule = _READ_BY.get(option.setting)
    if rule not in (None, name) and values[option.name] != option.default:
      raise ConfigError(option.name, f"needs --aggregator {rule}")
  if name == "mean":
    return None
  return AggregatorConfig(**{o.setting: values[o.name]
                             for o in options.declared(AggregatorConfig)})


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  """Mean of the rows of ``x`` where ``mask`` (0 when no row is present).

  >>> x = jnp.array([[1.0], [3.0], [100.0]])
  >>> masked_mean(x, jnp.array([True, True, False])).tolist()
  [2.0]
  """
  count = jnp.sum(mask)
  total = jnp.sum(jnp.where(mask[:, None], x, 0), axis=0)
  return total / jnp.maximum(count, 1)


def _sorted_present(x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Each column sorted with the present rows first (padding pushed to +inf)."""
  values = jnp.where(mask[:, None], x, jnp.inf)
  return jnp.sort(values, axis=0), jnp.sum(mask)


def masked_median(x: jax.Array, mask: jax.Array) -> jax.Array:
  """Coordinate-wise median of the present rows (0 when none is present).

  >>> x = jnp.array([[1.0, 0.0], [2.0, 5.0], [100.0, 6.0], [7.0, 7.0]])
  >>> masked_median(x, jnp.array([True, True, True, False])).tolist()
  [2.0, 5.0]
  """
  ordered, count = _sorted_present(x, mask)
  lo = jnp.take(ordered, jnp.maximum(count - 1, 0) // 2, axis=0)
  hi = jnp.take(ordered, count // 2, axis=0)
  return jnp.where(count > 0, 0.5 * (lo + hi), 0.0)


def trimmed_mean(x: jax.Array, mask: jax.Array, trim: float) -> jax.Array:
  """Coordinate-wise mean of the present rows without the floor(trim*count)
  smallest and largest values.

  >>> x = jnp.array([[-50.0], [1.0], [2.0], [3.0], [90.0]])
  >>> trimmed_mean(x, jnp.ones(5, bool), 0.2).tolist()
  [2.0]
  """
  ordered, count = _sorted_present(x, mask)
  # floor(trim * count) for every count, on the host: in float32 the product
  # can land just below a whole number (0.21 * 300 gave 62, leaving one more
  # extreme value in), and a fraction given in decimal (0.29) is meant exactly.
  cuts = np.floor(np.arange(x.shape[0] + 1) * float(trim) + 1e-9).astype(np.int32)
  cut = jnp.asarray(cuts)[count].astype(count.dtype)
  rank = jnp.arange(x.shape[0])[:, None]
  keep = (rank >= cut) & (rank < count - cut)
  total = jnp.sum(jnp.where(keep, ordered, 0), axis=0)
  return total / jnp.maximum(count - 2 * cut, 1)


def norm_bounded_mean(x: jax.Array, mask: jax.Array, bound: float) -> jax.Array:
  """Mean of the present rows, each scaled to L2 norm at most ``bound``.

  A row whose norm is not finite (NaN or inf entries: a diverged client, or
  an attacker sending them) counts as zeros, as DP clipping treats it
  (``clip_by_l2_norm``): one such row would otherwise make the mean NaN.

  >>> x = jnp.array([[3.0, 4.0], [0.6, 0.8], [jnp.nan, 0.0]])
  >>> [round(v, 4) for v in norm_bounded_mean(x, jnp.ones(3, bool), 1.0).tolist()]
  [0.4, 0.5333]
  """
  bounded, _ = jax.vmap(clip_by_l2_norm, (0, None))(x, bound)
  return masked_mean(bounded, mask)


def aggregate(config: AggregatorConfig, x: jax.Array, mask: jax.Array) -> jax.Array:
  """The (n,) estimate of the present rows' mean by ``config``'s rule.

  Args:
    config: The rule.
    x: (slots, n) updates (cast to float32; integer messages such as signs
      are averaged as numbers).
    mask: (slots,) bool, the slots holding a present client.

  One attacker's huge update moves the mean, not the median:

  >>> x = jnp.array([[1.0], [2.0], [3.0], [1000.0]])
  >>> mask = jnp.array([True, True, True, True])
  >>> aggregate(AggregatorConfig("mean"), x, mask).tolist()
  [251.5]
  >>> aggregate(AggregatorConfig("median"), x, mask).tolist()
  [2.5]
  """
  x = x.astype(jnp.float32)
  if config.name == "median":
    return masked_median(x, mask)
  if config.name == "trimmed-mean":
    return trimmed_mean(x, mask, config.trim)
  if config.name == "norm-bound":
    return norm_bounded_mean(x, mask, config.norm_bound)
  return masked_mean(x, mask)
