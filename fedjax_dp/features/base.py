"""The protocol of a round feature: pure functions the round calls at fixed points.

A feature is what a run may add to the plain federated round without the
round knowing it: malicious clients (``attack``), the canary audit
(``audit``), client failures (``dropouts``), adaptive clipping
(``adaptive_clip``). The round (``fedjax_dp.simulation.round``) calls every
feature of the run, in order, at each point below; a method a feature does
not override does nothing. Methods called inside the jitted round are pure
functions of their arguments.

Before the run (Python):
  ``check`` (a classmethod, before the server's setup): refuse a setting,
  one line naming the field;
  ``client_data`` (a classmethod): change the clients' data (poisoning);
  ``mechanism`` (a classmethod): what a round releases, as the feature
  changes it (correlated noise), for the accountant; ``accounted``: the
  same, with what the built feature knows (the noise strategy's column);
  ``sampler_share``: clients that join cohorts besides the sampler's draw;
  ``init``: the feature's state (carried and checkpointed with the server
  state) and the extra cohort slots its rounds need.
Each round (traced), every hook has one shape, ``hook(self, at, x) -> x``:
``at`` is the round as far as it is known (:class:`At`: the feature's state
and round value, the round's inputs, noise, chunk, ...) and ``x`` is what
the hook may change, returned unchanged by default:
  ``cohort``: extend the round's cohort (canaries);
  ``begin``: the feature's round value, from None (who attacks, who fails);
  ``train``: work once a round before the slots train (the attackers' message);
  ``noise``: the round's clip norm, sigma and noise shares;
  ``failures``: add slots that fail after the cohort is fixed;
  ``messages``: replace some slots' messages;
  ``contributions``: replace some slots' contributions and clipped count;
  ``tally``: a count summed over the cohort with the contributions, from None;
  ``total``: the round's (noisy) sum, before the server's update;
  ``observe``: the new state from the round's sum;
  ``info``: the round's counts, returned beside the state, from {}.
After evaluations and the run (Python):
  ``entry``: fields of a history entry; ``record``: fields of the record.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, NamedTuple, Protocol

import jax
import numpy as np

from fedjax_dp import keys, sampling
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import Option
from fedjax_dp.privacy.accounting import Mechanism
# The round's types a feature's hooks see (also importable from here).
from fedjax_dp.round_types import At, Chunk, Noise, Observed, Trainer  # noqa: F401
from fedjax_dp.schemes.base import Traits


class RunView(Protocol):
  """The run as a feature reads it: attributes of the
  :class:`~fedjax_dp.simulation.plan.Plan`, which satisfies this protocol.

  ``simulation.validate`` hands a feature's ``check`` the Plan before the
  server's setup (S None); ``simulation.prepare`` builds each feature with
  the Plan once S is known. A :class:`Conflict` names one of these
  attributes (:data:`VIEW_FIELDS`).

  Attributes:
    scheme_name: The scheme's name (for messages).
    traits: The scheme's declared traits.
    mechanism: What a round releases (``accounting.Mechanism``), before the
      built features' ``accounted``.
    num_clients: N.
    num_params: n, the model's weights.
    num_kept: K, values per message.
    clients_per_round: C*N, the expected cohort size.
    dropout_rate: Each sampled client fails before sending with this
      probability (``RunConfig.dropouts``).
    max_dropouts: l: DP noise shares are sized for |K| - l clients.
    rounds: T_cl.
    noise_multiplier: sigma of a DP scheme; 0 without DP.
    sigma_pending: ``noise_multiplier`` is a placeholder, to be calibrated
      to a target epsilon: a check of sigma waits for the calibrated one.
    delta: The target delta.
    sampler: The cohort sampler.
    max_cohort: Truncated Poisson sampling's cap (None: none).
    secure_aggregation: The sum is secure (thesis 5.2).
    kinds: The kinds of the run's features (``fedjax_dp.features.KINDS``).
    run_key: The run's root key.
    rate: q = C, the sampling rate (``RunConfig.rate``).
    cycle_length: b, cyclic Poisson sampling over b groups (1: none).
    min_separation: The fewest rounds between a client's participations
      that correlated noise assumes (``RunConfig.separation``: at most what
      the sampling guarantees).
    accountant: The run's accountant (``accounting.RUN_ACCOUNTANTS``).
    slot_multiple: Slot counts are multiples of this (devices).
    clip_norm: S (None without DP; None while a config is only validated).
  """

  # pylint: disable=missing-function-docstring
  @property
  def scheme_name(self) -> str: ...
  @property
  def traits(self) -> Traits: ...
  @property
  def mechanism(self) -> Mechanism: ...
  @property
  def num_clients(self) -> int: ...
  @property
  def num_params(self) -> int: ...
  @property
  def num_kept(self) -> int: ...
  @property
  def clients_per_round(self) -> int: ...
  @property
  def dropout_rate(self) -> float: ...
  @property
  def max_dropouts(self) -> int: ...
  @property
  def rounds(self) -> int: ...
  @property
  def noise_multiplier(self) -> float: ...
  @property
  def sigma_pending(self) -> bool: ...
  @property
  def delta(self) -> float: ...
  @property
  def sampler(self) -> str: ...
  @property
  def max_cohort(self) -> int | None: ...
  @property
  def secure_aggregation(self) -> bool: ...
  @property
  def kinds(self) -> tuple[str, ...]: ...
  @property
  def run_key(self) -> jax.Array: ...
  @property
  def rate(self) -> float: ...
  @property
  def cycle_length(self) -> int: ...
  @property
  def min_separation(self) -> int: ...
  @property
  def accountant(self) -> str: ...
  @property
  def slot_multiple(self) -> int: ...
  @property
  def clip_norm(self) -> float | None: ...


# What a Conflict may name besides a feature's kind.
VIEW_FIELDS = tuple(name for name, value in vars(RunView).items() if isinstance(value, property))


class Conflict(NamedTuple):
  """A setting a feature cannot be combined with, declared as data.

  Attributes:
    other: Another feature's kind, or a :class:`RunView` attribute that
      must be off (False, None or 0).
    why: What follows "cannot be combined with" in the error.
  """

  other: str
  why: str


class Feature:
  """A round feature built from its config, once per run (``fedjax_dp.features.build``).

  A feature declares, as class attributes: its ``kind``, its config class
  (``config_type``, a frozen dataclass whose fields declare their options,
  ``fedjax_dp.options.setting``), the heading of its options (``title``),
  the option that turns it on (``switch``; a field of the config, or a
  switch of its own in ``options``), what it cannot be combined with
  (``conflicts``) and the PRNG purposes it folds into the run's keys
  (``key_purposes``, checked unique against every other purpose,
  ``fedjax_dp.keys``).

  Attributes:
    config: Its config (an instance of ``config_type``).
    run: The run (:class:`RunView`, S known).
  """

  kind: ClassVar[str] = ""
  config_type: ClassVar[type] = type(None)
  title: ClassVar[str] = ""
  switch: ClassVar[str] = ""
  options: ClassVar[tuple[Option, ...]] = ()
  conflicts: ClassVar[tuple[Conflict, ...]] = ()
  key_purposes: ClassVar[tuple[keys.Purpose, ...]] = ()

  def __init__(self, config: Any, run: RunView):
    self.config = config
    self.run = run

  @property
  def keeps_shares(self) -> bool:
    """Whether a client's noise share must exist apart from the others (the
    feature replaces or reads a slot's contribution); False lets the round
    draw the shares' sum once (``Plan.noise_once``)."""
    return False

  # Before the run.
  @classmethod
  def from_options(cls, values: Mapping[str, Any]) -> Any:
    """The feature's config from its options' values (None: the feature is off).

    ``values`` holds every option's value by name (a front end's parsed
    controls; an option not given at its default). Off when the switch is
    None, False or 0; an option given without the switch is refused.

    Raises:
      ConfigError: An option given while the feature is off, naming it.
    """
    on = values[cls.switch]
    switch = next(o for o in cls.options if o.name == cls.switch)
    if not on:
      for option in cls.options:
        if option is not switch and values[option.name] != option.default:
          raise ConfigError(option.name, f"needs {switch.flag}")
      return None
    fields = {f.name for f in dataclasses.fields(cls.config_type)}
    return cls.config_type(**{o.setting: values[o.name] for o in cls.options
                              if o.setting in fields})

  @classmethod
  def check(cls, config: Any, run: RunView) -> None:
    """Raises ConfigError (one line, naming the field) for a setting it
    refuses; called before the server's setup (``run.clip_norm`` None).
    This default refuses the declared ``conflicts``; a feature that checks
    more calls it first."""
    del config
    for conflict in cls.conflicts:
      # A conflict names a kind or a RunView attribute (checked by ``register``).
      on = (conflict.other in run.kinds if conflict.other not in VIEW_FIELDS
            else getattr(run, conflict.other) not in (None, False, 0))
      if on:
        raise ConfigError(cls.switch, f"cannot be combined with {conflict.why}")

  @classmethod
  def client_data(cls, config: Any, data: ClientData, run_key: jax.Array) -> ClientData:
    """The clients' data as this feature changes it before the run (a
    backdoor's poisoned labels); default ``data``."""
    del config, run_key
    return data

  @classmethod
  def mechanism(cls, config: Any, mechanism: Mechanism) -> Mechanism:
    """What a round releases once this feature is on (default: unchanged)."""
    del config
    return mechanism

  def accounted(self, mechanism: Mechanism) -> Mechanism:
    """The release as the built feature leaves it for the accountant (what
    only the built feature knows: correlated noise's strategy; default:
    unchanged)."""
    return mechanism

  def sampler_share(self, run_key: jax.Array, num_clients: int) -> sampling.PoolShare | None:
    """Clients the sampler places in every cohort (None: the sampler alone)."""
    del run_key, num_clients
    return None

  def init(self) -> tuple[Any, int]:
    """(the feature's initial state, extra cohort slots a round needs)."""
    return None, 0

  # Each round (traced): every hook is ``hook(self, at, x) -> x``, ``at`` the
  # round as far as it is known (:class:`At`), ``x`` what the hook may change.
  def cohort(self, at: At, cohort: sampling.Cohort) -> sampling.Cohort:
    """The round's cohort with this feature's clients in its ``at.slots``
    extra slots (``at``: ``state``, ``t``, ``run_key``, ``slots``)."""
    del at
    return cohort

  def begin(self, at: At, value: Any) -> Any:
    """The feature's value for the round (``value`` None; ``at.inputs``: the
    round's keys, cohort and client keys)."""
    del at
    return value

  def train(self, at: At, value: Any) -> Any:
    """The round value once the round's model is known, before the slots
    train (``at.trainer``: the model, the data and the scheme's message)."""
    del at
    return value

  def noise(self, at: At, noise: Noise) -> Noise:
    """The round's DP parameters."""
    del at
    return noise

  def failures(self, at: At, failed: jax.Array) -> jax.Array:
    """(slots,) bool: the slots that fail after the cohort is fixed, with this
    feature's failures added to ``failed``."""
    del at
    return failed

  def messages(self, at: At, messages: jax.Array) -> jax.Array:
    """The chunk's messages (``at.chunk``) as this feature's slots send them."""
    del at
    return messages

  def contributions(self, at: At, contributions: tuple[jax.Array, jax.Array]
                    ) -> tuple[jax.Array, jax.Array]:
    """(contributions, clipped real clients) of the chunk (``at.messages``:
    what its slots sent)."""
    del at
    return contributions

  def tally(self, at: At, tally: Any) -> Any:
    """A pytree of counts over the chunk, summed over the cohort (``tally``
    None; None: no tally)."""
    del at
    return tally

  def total(self, at: At, total: jax.Array) -> jax.Array:
    """The round's sum of contributions (noise included) before the server's
    update (``at.value``, ``at.noise``)."""
    del at
    return total

  def observe(self, at: At, state: Any) -> Any:
    """The feature's state after the round (``at.observed``: the round's sum)."""
    del at
    return state

  def info(self, at: At, info: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """The round's counts (stacked over the rounds of an evaluation interval)."""
    del at
    return info

  # After evaluations and the run.
  def entry(self, labels: np.ndarray, predictions: np.ndarray, infos: dict) -> dict:
    """Fields of the history entry of an evaluation (``infos``: this feature's
    ``info`` of the rounds since the last one)."""
    del labels, predictions, infos
    return {}

  def record(self, state: Any, best: dict) -> dict:
    """Fields of the run's record (``best``: the best round's history entry)."""
    del state, best
    return {}

  def review(self, record: dict) -> dict:
    """Fields decided from the whole record (every feature's ``record`` and
    the accountant's epsilon among them), added to it last: the audit's
    ``violation``."""
    del record
    return {}
