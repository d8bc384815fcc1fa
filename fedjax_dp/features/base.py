"""The protocol of a round feature: pure functions the round calls at fixed points.

A feature is what a run may add to the plain federated round without the
round knowing it: malicious clients (``attack``), the canary audit
(``audit``), client failures (``dropouts``), adaptive clipping
(``adaptive_clip``). The round (``fedjax_dp.simulation.round``) calls every
feature of the run, in order, at each point below; a method a feature does
not override does nothing. Methods called inside the jitted round are pure
functions of their arguments.

Before the run (Python):
  ``validate``: refuse a setting, one line naming the field;
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

from typing import Any, Callable, ClassVar, NamedTuple

import jax
import numpy as np

from fedjax_dp import sampling


class Context(NamedTuple):
  """What a feature knows about its run before round 1.

  Attributes:
    config: The ``simulation.RunConfig``.
    scheme: The scheme (bound to the run once ``clip_norm`` is known).
    num_clients: N.
    num_params: n, the model's weights.
    num_values: m, values per message.
    mechanism: What a round releases (``accounting.Mechanism``).
    run_key: The run's root key.
    slot_multiple: Slot counts are multiples of this (devices).
    clip_norm: S once known (``init``); None at ``validate``.
  """

  config: Any
  scheme: Any
  num_clients: int
  num_params: int
  num_values: int
  mechanism: Any
  run_key: jax.Array
  slot_multiple: int = 4
  clip_norm: float | None = None

  @property
  def rate(self) -> float:
    """q, the sampling rate."""
    return self.config.rate(self.num_clients)


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


class Feature:
  """A round feature built from its config (``fedjax_dp.features``).

  Attributes:
    kind: The feature's name (``RunConfig.of(kind=config)``).
    config: Its frozen config dataclass.
    ctx: The run (:class:`Context`; ``clip_norm`` None until ``init``).
  """

  kind: ClassVar[str] = ""

  def __init__(self, config: Any, ctx: Context):
    self.config = config
    self.ctx = ctx

  # Before the run.
  def validate(self) -> None:
    """Raises ConfigError (one line, naming the field) for a setting it refuses."""

  def sampler_share(self, run_key: jax.Array, num_clients: int) -> sampling.Malicious | None:
    """Clients the sampler places in every cohort (None: the sampler alone)."""
    del run_key, num_clients
    return None

  def init(self, ctx: Context) -> tuple[Any, int]:
    """(the feature's initial state, extra cohort slots a round needs)."""
    del ctx
    return None, 0

  # Each round (traced).
  def cohort(self, state: Any, run_key: jax.Array, t: jax.Array, cohort: sampling.Cohort,
             slots: int, num_clients: int) -> sampling.Cohort:
    """The round's cohort with this feature's clients in its ``slots`` extra slots."""
    del state, run_key, t, slots, num_clients
    return cohort

  def begin(self, state: Any, inputs: Any) -> Any:
    """The feature's value for the round (``inputs``: ``simulation.RoundInputs``
    without feature values)."""
    del state, inputs
    return None

  def train(self, value: Any, model: Any, rcfg: Any, w: jax.Array, inputs: Any,
            data: Any) -> Any:
    """The round value once the round's model ``w`` is known (before the slots train)."""
    del model, rcfg, w, inputs, data
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
