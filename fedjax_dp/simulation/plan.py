"""A run resolved once: the :class:`Plan` that the round, the features and the record read.

:func:`fedjax_dp.simulation.setup.validate` checks a
:class:`~fedjax_dp.simulation.config.RunConfig` (what the user asked for)
and starts its ``Plan`` (what the run does), S left open;
:func:`fedjax_dp.simulation.setup.prepare` fills it: the clip norm S that was given,
calibrated or fixed by the scheme, the effective sigma, the number of values
a message keeps, the noise shares, the cohort's capacity and chunks, the
device mesh, the built features and the bits a value costs. Nothing after
``prepare`` reads a setting from anywhere else, and no value is stored
twice: the local training, the sampling rate and the sum are derived from
the config here, not copied.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax

from fedjax_dp import features as features_lib
from fedjax_dp import keys, sampling, sharding
from fedjax_dp.privacy import accounting
from fedjax_dp.schemes.base import LocalTraining, Noise, Scheme
from fedjax_dp.simulation import sums
from fedjax_dp.simulation.config import RunConfig


class Communication(NamedTuple):
  """Secure-aggregation settings and bits per value up and down
  (``simulation.setup.communication``).

  Attributes:
    secure_bits: b, the secure sum's modulus 2^b; None: a plain or robust sum.
    secure_scale: 2^f, the fixed-point scale of real contributions (1 for
      integers and without secure aggregation).
    secure_frac_bits: f as the record states it (None: integers or no
      secure aggregation).
    upstream_bits: Bits per upstream value.
    downstream_bits: Bits per downstream value.
  """

  secure_bits: int | None = None
  secure_scale: float = 1.0
  secure_frac_bits: int | None = None
  upstream_bits: float = 32
  downstream_bits: int = 32


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
  """A run resolved once: every value the round needs.

  Filled in two phases: ``simulation.validate`` checks a config against a
  scheme, a model and the data's shape and returns the Plan with S, the
  capacity, the features and the constants still open; ``simulation.prepare``
  fills them after the server's setup. The round's features read it
  through the ``features.RunView`` protocol (the properties below).

  Attributes:
    config: The run's nested config, as given (its fingerprint).
    scheme: The scheme, as configured (nothing of the run stored on it).
    num_clients: N.
    num_kept: K, the values a client's message keeps (``Scheme.num_kept``;
      the papers' m for FL-CS).
    capacity: The cohort's slots (every planned round's cohort fits; 0
      before the server's setup).
    num_params: n, the model's weights.
    samples_per_client: |D_k|, the width of the clients' data.
    clip_norm: S for a DP scheme (given, calibrated on public data, or the
      scheme's fixed sensitivity); None for a scheme without DP.
    clip_source: Where S came from (``setup.clip_norm_of``): "given", the
      scheme's ``sensitivity_reason``, or how it was calibrated; None for a
      scheme without DP.
    noise_multiplier: The effective sigma: the config's for a DP scheme, 0
      otherwise.
    sigma_pending: ``noise_multiplier`` is a placeholder: the config asks
      for a target epsilon that sigma is not yet calibrated to (the Plan
      ``setup.prepare`` calibrates on), so checks of sigma wait.
    num_shares: (fewest, most) shares a round can split the aggregate noise
      into: the cohort size minus the tolerated dropouts, over the planned
      rounds and up to every slot.
    client_chunk: Slots trained and summed at a time (None: all at once).
    mesh: The 1-D device mesh the slots are sharded over (None: one device).
    features: The round's features (``fedjax_dp.features.build``), built once.
    feature_slots: The extra slots each feature's clients take after the cohort's.
    comm: Secure aggregation and bits per value.
    mechanism: What a round releases, for the accountant (before the
      server's setup: before the built features' ``accounted``).
    scheme_constants: What the scheme computed once for the run
      (``Scheme.run_constants``: FL-SIGN-DP's alias tables, CDP-LQ's batch
      capacity); None for a scheme without ``traits.run_constants``.
    sampling_keys: (rounds, 2) every planned round's sampling key.
    run_key: The run's root key.
  """

  config: RunConfig
  scheme: Scheme
  num_clients: int
  num_kept: int
  capacity: int = 0
  num_params: int = 0
  samples_per_client: int = 0
  clip_norm: float | None = None
  clip_source: str | None = None
  noise_multiplier: float = 0.0
  sigma_pending: bool = False
  num_shares: tuple[int, int] = (1, 1)
  client_chunk: int | None = None
  mesh: jax.sharding.Mesh | None = None
  features: tuple = ()
  feature_slots: tuple[int, ...] = ()
  comm: Communication = Communication()
  mechanism: accounting.Mechanism | None = None
  scheme_constants: Any = None
  sampling_keys: jax.Array | None = None
  run_key: jax.Array | None = None

  def scheme_keywords(self, noise: Noise | None = None) -> dict:
    """The keywords the round passes the scheme's methods when it declares
    ``traits.run_constants``: ``constants`` and, given, the round's ``noise``
    (``client_message``, ``client_stream``); {} for any other scheme."""
    if not self.scheme.traits.run_constants:
      return {}
    return {"constants": self.scheme_constants, **({} if noise is None else {"noise": noise})}

  @property
  def scheme_name(self) -> str:
    """The scheme's name."""
    return self.scheme.name

  @property
  def traits(self):
    """The scheme's declared traits (``schemes.Traits``)."""
    return self.scheme.traits

  @property
  def rounds(self) -> int:
    """T_cl."""
    return self.config.training.rounds

  @property
  def delta(self) -> float:
    """The target delta."""
    return self.config.privacy.delta

  @property
  def max_cohort(self) -> int | None:
    """Truncated Poisson sampling's cap (None: none)."""
    return self.config.privacy.max_cohort

  @property
  def cycle_length(self) -> int:
    """b, cyclic Poisson sampling over b groups (1: none)."""
    return self.config.privacy.cycle_length

  @property
  def min_separation(self) -> int:
    """The fewest rounds between a client's participations that correlated
    noise assumes (``RunConfig.separation``)."""
    return self.config.separation(self.num_clients)

  @property
  def accountant(self) -> str:
    """The run's accountant (``accounting.RUN_ACCOUNTANTS``)."""
    return self.config.privacy.accountant

  @property
  def secure_aggregation(self) -> bool:
    """The sum is secure (thesis 5.2)."""
    return self.config.secure.secure_aggregation

  @property
  def kinds(self) -> tuple[str, ...]:
    """The kinds of the run's features (``features.kinds``)."""
    return features_lib.kinds(self.config)

  @property
  def slot_multiple(self) -> int:
    """Slot counts are multiples of this: 4, and the mesh's devices."""
    return math.lcm(4, sharding.mesh_size(self.mesh))

  @property
  def clients_per_round(self) -> int:
    """C*N, the expected cohort size: the DP mean's denominator."""
    return self.config.training.clients_per_round

  @property
  def max_dropouts(self) -> int:
    """l: DP noise shares are sized for |K| - l clients."""
    return self.config.dropouts.max_dropouts

  @property
  def dropout_rate(self) -> float:
    """Each sampled client fails before sending with this probability."""
    return self.config.dropouts.dropout_rate

  @property
  def rate(self) -> float:
    """q = C, the sampling rate."""
    return self.config.rate(self.num_clients)

  @property
  def sampler(self) -> str:
    """The cohort sampler (``sampling.SAMPLERS``)."""
    return self.config.privacy.sampler

  @property
  def local(self) -> LocalTraining:
    """The clients' local training."""
    return self.config.local

  @property
  def slots(self) -> int:
    """Every slot of the round: the cohort's, then the features' (canaries)."""
    return self.capacity + sum(self.feature_slots)

  @property
  def aggregator(self):
    """The robust rule over the individual updates, or None (the sum)."""
    agg = self.config.aggregator
    return agg if agg is not None and agg.robust else None

  @functools.cached_property
  def sum(self):
    """The round's sum (``simulation.sums``: secure, robust or plain), built
    once a plan."""
    return sums.make(self.comm.secure_bits, self.comm.secure_scale,
                     self.config.secure.secure_neighbours, self.aggregator)

  @property
  def noise_once(self) -> bool:
    """Whether the round draws the cohort's Gaussian noise as one sum.

    The clients' shares ``G(0, S^2 sigma^2 / shares)`` (UAI Alg. 3 line 27)
    reach the server only as their sum when the scheme releases the plain
    client-level Gaussian mechanism with fresh noise every round through the
    library's ``Scheme.privatize`` (a scheme that overrides it always draws
    its own shares: FL-SIGN-DP's discrete Gaussian ones, whose sum is not a
    discrete Gaussian; CDP-LQ's record-level noise), the sum is
    plain (no simulated secure aggregation, whose ring sees each share; no
    robust rule, which sees each update) and no feature keeps a share apart
    (``Feature.keeps_shares``: attackers who skip their noise). The sum of
    the present clients' shares is then drawn once
    (``privacy.noise.aggregate_noise``, the same distribution, dropouts
    included) and the clients' ``privatize`` runs with sigma 0.
    """
    m = self.mechanism
    return (self.scheme.traits.dp and m is not None and m.kind == "gaussian"
            and m.level == "client" and m.correlation == "independent"
            and type(self.scheme).privatize is Scheme.privatize  # the library's shares
            and self.comm.secure_bits is None and self.aggregator is None
            and not any(f.keeps_shares for f in self.features))

  def sampler_share(self, run_key: jax.Array) -> sampling.PoolShare | None:
    """The clients a feature places in every cohort (the attackers), if any."""
    return sampler_share(self.features, run_key, self.num_clients)

  def schedule(self, run_key: jax.Array) -> sampling.Schedule | None:
    """Balls-in-bins' or b-min-sep's participation (:func:`schedule`)."""
    return schedule(self.config, self.num_clients, run_key)

  def feature_state(self, kind: str, features_state: tuple) -> Any:
    """The state of the run's feature of this kind among ``features_state``
    (``ServerState.features``); None when the run has no such feature."""
    for f, fstate in zip(self.features, features_state):
      if f.kind == kind:
        return fstate
    return None


def sampler_share(features: tuple, run_key: jax.Array,
                  num_clients: int) -> sampling.PoolShare | None:
  """The clients one of the run's built features places in every cohort (the
  attackers: ``Feature.sampler_share``), if any; :meth:`Plan.sampler_share`,
  and ``prepare``'s before its plan exists."""
  shares = (f.sampler_share(run_key, num_clients) for f in features)
  return next((s for s in shares if s is not None), None)


def schedule(cfg: RunConfig, num_clients: int, run_key: jax.Array
             ) -> sampling.Schedule | None:
  """The run's balls-in-bins or b-min-sep participation (``sampling.Schedule``,
  from the run's ``keys.PARTICIPATION`` key); None for the other samplers."""
  return sampling.schedule_for(cfg.privacy.sampler, keys.purpose(run_key, keys.PARTICIPATION),
                               cfg.rate(num_clients), cfg.privacy.min_separation)
