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
  ``sampler_share``: clients that join cohorts besides the sampler's draw;
  ``init``: the feature's state (carried and checkpointed with the server
  state) and the extra cohort slots its rounds need.
Each round (traced):
  ``cohort``: extend the round's cohort (canaries);
  ``begin``: the feature's round value (who attacks, who fails);
  ``train``: work once a round before the slots train (the attackers' message);
  ``noise``: the round's clip norm, sigma and noise shares;
  ``failures``: slots that fail after the cohort is fixed;
  ``messages``: replace some slots' messages;
  ``contributions``: replace some slots' contributions and clipped count;
  ``tally``: a count summed over the cohort with the contributions;
  ``observe``: the new state from the round's sum;
  ``info``: the round's counts, returned beside the state.
After evaluations and the run (Python):
  ``entry``: fields of a history entry; ``record``: fields of the record.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, NamedTuple

import jax
import numpy as np

from fedjax_dp import deprecation, keys, sampling
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import Option
from fedjax_dp.privacy.accounting import Mechanism
from fedjax_dp.schemes.base import Traits

if TYPE_CHECKING:  # the round's types name the features: annotations only
  from fedjax_dp.data import ClientData
  from fedjax_dp.models import FlatModel
  from fedjax_dp.simulation.plan import Plan
  from fedjax_dp.simulation.round import RoundInputs


class RunView(NamedTuple):
  """The run as a feature sees it: a narrow, typed view of the
  :class:`~fedjax_dp.simulation.plan.Plan` (``simulation.setup``).

  Attributes:
    scheme_name: The scheme's name (for messages).
    traits: The scheme's declared traits.
    mechanism: What a round releases (``accounting.Mechanism``).
    num_clients: N.
    num_params: n, the model's weights.
    num_kept: K, values per message.
    clients_per_round: C*N, the expected cohort size.
    rounds: T_cl.
    noise_multiplier: The config's sigma.
    delta: The target delta.
    sampler: The cohort sampler.
    max_cohort: Truncated Poisson sampling's cap (None: none).
    secure_aggregation: The sum is secure (thesis 5.2).
    kinds: The kinds of the run's features (``fedjax_dp.features.KINDS``).
    run_key: The run's root key.
    rate: q = C, the sampling rate (``RunConfig.rate``).
    slot_multiple: Slot counts are multiples of this (devices).
    clip_norm: S (None without DP; None while a config is only validated).
  """

  scheme_name: str
  traits: Traits
  mechanism: Mechanism
  num_clients: int
  num_params: int
  num_kept: int
  clients_per_round: int
  rounds: int
  noise_multiplier: float
  delta: float
  sampler: str
  max_cohort: int | None
  secure_aggregation: bool
  kinds: tuple[str, ...]
  run_key: jax.Array
  rate: float
  slot_multiple: int = 4
  clip_norm: float | None = None


class Chunk(NamedTuple):
  """The slots the round trains and sums at once.

  Attributes:
    ids: (chunk,) their client ids (canaries: N + j).
    mask: (chunk,) real (sampled) slots.
    present: (chunk,) real slots whose client did not fail.
    take: Slices a per-slot array of the round (all its slots) to this chunk.
  """

  ids: jax.Array
  mask: jax.Array
  present: jax.Array
  take: Callable[[jax.Array], jax.Array]


class Noise(NamedTuple):
  """The round's DP parameters: S, sigma, and the shares the noise is split into."""

  clip_norm: jax.Array | float
  noise_multiplier: jax.Array | float
  num_shares: jax.Array


class Observed(NamedTuple):
  """What the round's sum tells a feature (``observe``).

  Attributes:
    total: The (noisy) sum of the contributions.
    tally: The feature's ``tally`` summed over the cohort (None without).
    slot_mask: (slots,) sampled slots.
    present: (slots,) sampled slots whose client did not fail.
    noise: The round's :class:`Noise`.
    round_key: The round's key (``fedjax_dp.keys``).
  """

  total: jax.Array
  tally: Any
  slot_mask: jax.Array
  present: jax.Array
  noise: Noise
  round_key: jax.Array


class Conflict(NamedTuple):
  """A setting a feature cannot be combined with, declared as data.

  Attributes:
    other: Another feature's kind, or a :class:`RunView` field that must be
      off (False, None or 0).
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
  def ctx(self) -> RunView:
    """Deprecated (0.1.0's ``Context``): :attr:`run`."""
    deprecation.warn("Feature.ctx", "Feature.run", "0.3.0")
    return self.run

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
    given = run._asdict()
    for conflict in cls.conflicts:
      if conflict.other in run.kinds or given.get(conflict.other) not in (None, False, 0):
        raise ConfigError(cls.switch, f"cannot be combined with {conflict.why}")

  @classmethod
  def client_data(cls, config: Any, data: ClientData, run_key: jax.Array) -> ClientData:
    """The clients' data as this feature changes it before the run (a
    backdoor's poisoned labels); default ``data``."""
    del config, run_key
    return data

  def sampler_share(self, run_key: jax.Array, num_clients: int) -> sampling.Malicious | None:
    """Clients the sampler places in every cohort (None: the sampler alone)."""
    del run_key, num_clients
    return None

  def init(self) -> tuple[Any, int]:
    """(the feature's initial state, extra cohort slots a round needs)."""
    return None, 0

  # Each round (traced).
  def cohort(self, state: Any, run_key: jax.Array, t: jax.Array, cohort: sampling.Cohort,
             slots: int, num_clients: int) -> sampling.Cohort:
    """The round's cohort with this feature's clients in its ``slots`` extra slots."""
    del state, run_key, t, slots, num_clients
    return cohort

  def begin(self, state: Any, inputs: RoundInputs) -> Any:
    """The feature's value for the round (``inputs``: ``simulation.RoundInputs``
    without feature values)."""
    del state, inputs
    return None

  def train(self, value: Any, model: FlatModel, plan: Plan, w: jax.Array,
            inputs: RoundInputs, data: ClientData) -> Any:
    """The round value once the round's model ``w`` is known (before the slots train)."""
    del model, plan, w, inputs, data
    return value

  def noise(self, state: Any, noise: Noise) -> Noise:
    """The round's DP parameters."""
    del state
    return noise

  def failures(self, value: Any, slots: int) -> jax.Array | None:
    """(slots,) bool: slots that fail after the cohort is fixed (None: none)."""
    del value, slots
    return None

  def messages(self, state: Any, value: Any, chunk: Chunk, messages: jax.Array,
               noise: Noise) -> jax.Array:
    """The chunk's messages as this feature's slots send them."""
    del state, value, chunk, noise
    return messages

  def contributions(self, value: Any, chunk: Chunk, messages: jax.Array,
                    contributions: jax.Array, clipped: jax.Array
                    ) -> tuple[jax.Array, jax.Array]:
    """(contributions, clipped real clients) of the chunk."""
    del value, chunk, messages
    return contributions, clipped

  def tally(self, state: Any, chunk: Chunk, messages: jax.Array, noise: Noise) -> Any:
    """A pytree of counts over the chunk, summed over the cohort (None: none)."""
    del state, chunk, messages, noise
    return None

  def observe(self, state: Any, value: Any, observed: Observed) -> Any:
    """The state after the round."""
    del value, observed
    return state

  def info(self, value: Any) -> dict[str, jax.Array]:
    """The round's counts (stacked over the rounds of an evaluation interval)."""
    del value
    return {}

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
