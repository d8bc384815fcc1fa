"""The round's shared types: what the round, the schemes and the features pass.

They live on the ground floor, below ``schemes``, ``features`` and
``simulation``, so that each of those imports them and none imports another
for a type: the package has no import cycle, not even one for annotations
(``tests/test_layering.py``). Each is also exported where it is used:
``schemes.Noise``, ``features.At`` (and ``Chunk``, ``Observed``,
``Trainer``), ``simulation.RoundInputs``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from fedjax_dp import keys, sampling
from fedjax_dp.data import ClientData
from fedjax_dp.models import FlatModel


class Noise(NamedTuple):
  """The round's DP parameters: S, sigma, and the shares the noise is split into.

  The plan's S and sigma, as the run's features change them (adaptive
  clipping); ``num_shares`` is the cohort's share count (``privatize``).
  """

  clip_norm: jax.Array | float
  noise_multiplier: jax.Array | float
  num_shares: jax.Array


class RoundInputs(NamedTuple):
  """What a round derives from (state, run key, t): keys, cohort, what the
  clients share (the scheme's ``round_plan``) and each feature's round value."""

  keys: keys.RoundKeys
  cohort: sampling.Cohort
  shared: Any
  train_keys: jax.Array
  noise_keys: jax.Array
  run_key: jax.Array
  features: tuple = ()


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


class Trainer(NamedTuple):
  """Local training as the round runs it, for a feature's ``train`` hook.

  Attributes:
    model: The run's model.
    w: (n,) the round's global model.
    data: The clients' data.
    local: The clients' local training.
    message: ``message(model, x, y, key, local)``: the scheme's
      ``client_message`` for this round (its shared plan and noise), with
      any model and local training.
  """

  model: FlatModel
  w: jax.Array
  data: ClientData
  local: Any
  message: Callable[..., jax.Array]


class At(NamedTuple):
  """The round as a feature's hook sees it; what is not known yet is None.

  Attributes:
    state: This feature's state (carried between rounds and checkpointed).
    value: This feature's round value (``begin``'s; None before it).
    t: The round, from 1 (``cohort``, ``begin``, ``observe``).
    run_key: The run's root key (``cohort``, ``begin``, ``observe``; later
      also ``inputs.run_key``).
    slots: This feature's extra cohort slots (``init``'s).
    inputs: The round's keys, cohort, shared plan and client keys
      (``simulation.RoundInputs``; from ``begin`` on).
    noise: The round's :class:`Noise` (from ``noise``'s result on).
    trainer: Local training (``train``).
    chunk: The slots being trained and summed (``messages``,
      ``contributions``, ``tally``).
    messages: The chunk's messages (``contributions``, ``tally``).
    observed: The round's sum (``observe``).
  """

  state: Any = None
  value: Any = None
  t: jax.Array | None = None
  run_key: jax.Array | None = None
  slots: int = 0
  inputs: RoundInputs | None = None
  noise: Noise | None = None
  trainer: Trainer | None = None
  chunk: Chunk | None = None
  messages: jax.Array | None = None
  observed: Observed | None = None
