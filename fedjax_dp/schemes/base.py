"""The interface every scheme implements: pure functions plus declared traits.

A round of any scheme (thesis Ch. 2, UAI 2021 Sec. 3) is, in
``fedjax_dp.simulation``, inside ``jit``:

1. ``round_plan``: what all clients of the round share (a coordinate subset
   drawn from the round's shared seed, ...), from the scheme state;
2. ``client_message``: one client's local training and encoding into the
   vector it sends (vmapped over the cohort by the round);
3. ``privatize``: each client's input to the sum. The default is the
   Gaussian mechanism of UAI Alg. 3 for ``traits.dp`` schemes (clip to S,
   add a share ``G(0, S^2 sigma^2 / shares)``) and the message itself
   otherwise; FL-SIGN-DP overrides it with discrete Gaussian integers;
4. the round sums the contributions, plainly or under simulated secure
   aggregation, and adds ``server_noise`` when no share arrived;
5. ``server_update``: decode the mean and update the model and state.

Before round 1 the server runs ``setup`` (public-data work such as the Top-K
selection), ``calibrate_clip`` (S from public data) and, for a scheme that
declares ``traits.run_constants``, ``run_constants`` (what it computes once
for the run: CDP-LQ's batch capacity, FL-SIGN-DP's alias tables). The
constants are kept in the run's ``Plan``, never on the scheme, and passed
back to the scheme's round methods with the round's :class:`Noise`.
``mechanism`` states what a round releases, as data
(:class:`fedjax_dp.privacy.accounting.Mechanism`), and the accountant
composes it; ``diagnostics`` and ``describe`` add fields to the run's record.

Everything optional has a default here; what a scheme is (integer messages,
bits per value, a fixed sensitivity, ...) is declared in :class:`Traits`,
never discovered by probing for attributes.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp import local_training
from fedjax_dp.models import FlatModel
from fedjax_dp.options import Option
from fedjax_dp.privacy import noise as noise_lib
from fedjax_dp.privacy.accounting import Mechanism
from fedjax_dp.round_types import Noise


class LocalTraining(NamedTuple):
  """Client-side hyper-parameters: T_gd optimiser steps with |B| and eta.

  Attributes:
    steps: T_gd.
    batch_size: |B|.
    lr: eta.
    optimizer: One of ``local_training.OPTIMIZERS``: ``"sgd"`` (the UAI paper's,
      the default) or ``"adam"`` (thesis Table 8.1: CIFAR-10 and IMDB), its
      state fresh every round.
  """

  steps: int
  batch_size: int
  lr: float
  optimizer: str = "sgd"

  def update(self, model: FlatModel, w: jax.Array, x: jax.Array, y: jax.Array,
             key: jax.Array, **options) -> jax.Array:
    """One client's ``w_end - w`` (``model.local_update`` with these settings).

    ``options``: ``local_update``'s mask arguments (``grad_mask``,
    ``grad_indices``, ``only_indices``).
    """
    return model.local_update(w, x, y, key, steps=self.steps, batch_size=self.batch_size,
                              lr=self.lr, optimizer=self.optimizer, **options)

  def train(self, loss_fn: Callable[..., jax.Array], w: jax.Array, x: jax.Array,
            y: jax.Array, key: jax.Array, grad_mask: jax.Array | None = None) -> jax.Array:
    """The weights after these steps from ``w`` on (x, y) (``local_training.local_train``):
    the server's public-data round that calibrates S (UAI Sec. 4)."""
    return local_training.local_train(loss_fn, w, x, y, key, steps=self.steps,
                              batch_size=self.batch_size,
                              optimizer=local_training.optimizer(self.optimizer, self.lr),
                              grad_mask=grad_mask)


class Traits(NamedTuple):
  """What a scheme is, declared once (defaults: a real-valued, 32-bit scheme).

  Attributes:
    dp: Client-level DP: the default ``privatize`` clips each message to S
      and adds a Gaussian share; the server divides the sum by the expected
      cohort size (a public constant).
    uses_ratio: The compression ratio r applies.
    integer_messages: Contributions are integers: secure aggregation encodes
      them with scale 1, and the plain sum is an integer sum.
    max_abs_value: Largest |coordinate| of a noiseless contribution, for the
      secure-aggregation modulus; None: S.
    upstream_bits: Bits per upstream value without secure aggregation; None:
      the thesis 5.2.4 modulus (a scheme whose messages are always encrypted).
    downstream_bits: Bits per downstream value.
    fixed_sensitivity: The sensitivity is fixed by construction (e.g. a
      sign vector's sqrt(n)): ``calibrate_clip`` returns it and a user's
      clip norm is ignored. False: messages are clipped to S.
    sensitivity_reason: Why it is fixed, as the run's record says where S
      came from (required with ``fixed_sensitivity``, empty without).
    measured_streams: Clients send an integer stream (``client_stream``);
      the coded size (``measure_stream``) of this many clients' streams is
      measured in the first round of every evaluation interval and replaces
      the nominal bits per value. 0: nothing measured.
    public_holdout: Training examples held out of the clients' data as the
      server's public set (Fed-SMP top_k); 0: the UAI public batch.
    local_optimizers: The clients' optimisers the scheme's training follows
      (``local_training.OPTIMIZERS``); Fed-SMP's momentum SGD and CDP-LQ's DP-SGD
      are SGD only.
    run_constants: The scheme computes constants once for a DP run
      (:meth:`Scheme.run_constants`). The round then passes the keywords
      ``noise`` (the round's :class:`Noise`) and ``constants`` to
      ``client_message`` and ``client_stream``, and ``constants`` to
      ``privatize`` and ``server_noise``; without the trait it passes neither.
    trains_by_local_update: A client's message is computed from the model's
      ``local_update`` (the attacks of ``fedjax_dp.features.attack`` replace
      it); False for a scheme with training of its own (signSGD's one
      gradient, CDP-LQ's DP-SGD), which an attack's update cannot reach.
    fixed_positions: Each value of a message stands for the same model
      coordinates in every round (a fixed subset or operator), so noise
      correlated across rounds on the message's K values cancels in the
      model as the strategy intends; False for a mask drawn anew each
      round (FL-BASIC, FL-BAS-2, FL-RND, Fed-SMP), where correlated noise
      would land on other weights each round and never cancel (refused
      below r = 1, ``fedjax_dp.features.correlated_noise``).
  """

  dp: bool = False
  uses_ratio: bool = True
  integer_messages: bool = False
  max_abs_value: float | None = None
  upstream_bits: int | None = 32
  downstream_bits: int = 32
  fixed_sensitivity: bool = False
  sensitivity_reason: str = ""
  measured_streams: int = 0
  public_holdout: int = 0
  local_optimizers: tuple[str, ...] = ("sgd", "adam")
  run_constants: bool = False
  trains_by_local_update: bool = True
  fixed_positions: bool = True

  def check(self, name: str) -> None:
    """Raises ValueError where the declaration contradicts itself."""
    if self.fixed_sensitivity != bool(self.sensitivity_reason):
      raise ValueError(f"{name}: Traits.fixed_sensitivity needs a sensitivity_reason, "
                       "and a sensitivity_reason needs fixed_sensitivity=True")


class SetupData(NamedTuple):
  """What the server knows before round 1.

  Attributes:
    model: The model.
    w0: (n,) initial weights (shared by every party, UAI Alg. 1 line 2).
    public_x: The server's public batch (UAI Sec. 4).
    public_y: Its labels.
    key: Setup key; sub-keys by the ``keys.SETUP_*`` purposes.
    ratio: Compression ratio r.
    init_steps: T_init public-data steps.
    local: Local-training hyper-parameters.
    run_key: The run's root key (for schemes that precompute from the
      clients' keys, such as CDP-LQ's batch capacity).
    num_clients: N.
    samples_per_client: |D_k|.
    rounds: T_cl.
    noise_multiplier: sigma (0 for non-DP schemes).
    num_shares: (fewest, most) noise shares a round of the run can split the
      aggregate noise into (``privatize``'s ``num_shares``: cohort size minus
      the tolerated dropouts, thesis 5.2.5): the fewest over the planned
      rounds' cohorts, the most the cohort capacity allows.
  """

  model: FlatModel
  w0: jax.Array
  public_x: jax.Array
  public_y: jax.Array
  key: jax.Array
  ratio: float
  init_steps: int
  local: LocalTraining
  run_key: jax.Array | None = None
  num_clients: int = 1
  samples_per_client: int = 1
  rounds: int = 1
  noise_multiplier: float = 0.0
  num_shares: tuple[int, int] = (1, 1)


class Scheme(abc.ABC):
  """A federated learning scheme (see the module docstring for the round).

  Subclasses are frozen dataclasses with a ``name`` and a ``reference``;
  they implement the abstract methods and override a default only where
  the scheme differs.
  """

  name: str
  reference: str

  # --- Declared properties. -------------------------------------------------

  @property
  @abc.abstractmethod
  def traits(self) -> Traits:
    """What the scheme is (see :class:`Traits`)."""

  @property
  def dp(self) -> bool:
    """Client-level DP (``traits.dp``)."""
    return self.traits.dp

  @property
  def uses_ratio(self) -> bool:
    """The compression ratio r applies (``traits.uses_ratio``)."""
    return self.traits.uses_ratio

  def validate(self, num_params: int, ratio: float) -> None:
    """Raises ValueError (one line) for a bad option: a
    :class:`~fedjax_dp.errors.ConfigError` naming the attribute where an
    option of the family sets it (``Option.field``), so that the command
    line names the option's flag."""

  @abc.abstractmethod
  def num_kept(self, num_params: int, ratio: float) -> int:
    """K, the values of a client's message (``Plan.num_kept``)."""

  @abc.abstractmethod
  def num_downstream(self, num_params: int, ratio: float) -> int:
    """Values the server sends each client per round."""

  # --- Server, before round 1. ------------------------------------------------

  @abc.abstractmethod
  def setup(self, data: SetupData) -> Any:
    """The scheme's initial server state (a pytree)."""

  @abc.abstractmethod
  def calibrate_clip(self, data: SetupData, state: Any) -> float:
    """Clip norm S derived from public data (used by DP schemes)."""

  def run_constants(self, data: SetupData, clip_norm: float) -> Any:
    """What a scheme that declares ``traits.run_constants`` computes once
    for a DP run with clip norm S (``data``: with the run's sigma and share
    counts); kept in ``Plan.scheme_constants`` and passed back to the round
    methods as ``constants``. Default: None."""
    del data, clip_norm
    return None

  # --- The round. -------------------------------------------------------------

  @abc.abstractmethod
  def round_plan(self, state: Any, key: jax.Array, num_params: int, num_kept: int) -> Any:
    """What every client shares this round, from the round's shared key."""

  @abc.abstractmethod
  def client_message(self, model: FlatModel, w: jax.Array, plan: Any, x: jax.Array,
                     y: jax.Array, key: jax.Array, local: LocalTraining) -> jax.Array:
    """One client's (K,) message: local training then encoding (with
    ``traits.run_constants``, also the keywords ``noise`` and ``constants``)."""

  def privatize(self, messages: jax.Array, slot_mask: jax.Array, noise_keys: jax.Array,
                noise: Noise) -> tuple[jax.Array, jax.Array]:
    """Each client's input to the (secure) sum, and how many were clipped.

    DP: ``clip(m_k) + G(0, S^2 sigma^2 / num_shares)`` (UAI Alg. 3 lines
    25-27; ``fedjax_dp.privacy.noise.privatize``); otherwise the messages.
    Where no share is needed apart, the round calls this default with sigma
    0 and draws the shares' sum once (``Plan.noise_once``); a scheme that
    overrides it always gets the round's sigma and draws its own shares.

    Args:
      messages: (capacity, K) messages.
      slot_mask: (capacity,) real participants.
      noise_keys: (capacity, 2) per-client noise keys.
      noise: The round's S (``clip_norm``), sigma (``noise_multiplier``) and
        how many shares the aggregate noise is split into (``num_shares``:
        |K|, or |K| - l to tolerate l failures, thesis 5.2.5).

    With ``traits.run_constants`` it also takes the keyword ``constants``.

    Returns:
      ``(contributions, num_clipped)``.
    """
    if self.traits.dp:
      return noise_lib.privatize(messages, slot_mask, noise_keys, noise.clip_norm,
                                 noise.noise_multiplier, noise.num_shares)
    return messages, jnp.zeros((), jnp.int32)

  def server_noise(self, key: jax.Array, shape: tuple[int, ...], noise: Noise) -> jax.Array:
    """The full aggregate noise ``G(0, S^2 sigma^2)`` of the round's ``noise``,
    added by the server when no client's share arrives (DP schemes only;
    with ``traits.run_constants``, also the keyword ``constants``)."""
    return noise_lib.server_noise(key, shape, jnp.float32, noise.clip_norm,
                                  noise.noise_multiplier)

  @abc.abstractmethod
  def server_update(self, w: jax.Array, state: Any, mean: jax.Array,
                    plan: Any) -> tuple[jax.Array, Any]:
    """New (weights, state) from the mean contribution."""

  # --- Coded streams (``traits.measured_streams``). ----------------------------

  def client_stream(self, model: FlatModel, w: jax.Array, plan: Any, x: jax.Array,
                    y: jax.Array, key: jax.Array, local: LocalTraining) -> jax.Array:
    """The integer stream a client transmits (``traits.measured_streams``;
    the keywords as :meth:`client_message`'s).

    Raises:
      TypeError: The scheme sends real values, not a coded stream (the round
        calls this only when ``traits.measured_streams > 0``).
    """
    raise TypeError(f"{self.name} sends real values, not a coded stream")

  def measure_stream(self, stream, num_params: int):
    """Coded size of one stream, outside jit (``traits.measured_streams``).

    Raises:
      TypeError: As :meth:`client_stream`.
    """
    raise TypeError(f"{self.name} sends real values, not a coded stream")

  # --- Privacy and the record. ---------------------------------------------------

  def mechanism(self, noise_multiplier: float, num_kept: int, local: LocalTraining,
                samples_per_client: int) -> Mechanism:
    """What one round releases, for the accountant.

    Default: client-level Poisson-subsampled Gaussian with noise multiplier
    sigma for DP schemes, nothing otherwise.

    Args:
      noise_multiplier: sigma.
      num_kept: K, values per message.
      local: The clients' local training.
      samples_per_client: |D_k|.
    """
    del num_kept, local, samples_per_client
    if not self.traits.dp:
      return Mechanism(kind="none")
    return Mechanism(kind="gaussian", noise_multiplier=noise_multiplier)

  def diagnostics(self, state: Any, rounds_done: int) -> dict:
    """Fields of the server state worth a look after ``rounds_done`` rounds
    (in every history entry and the record); default none."""
    del state, rounds_done
    return {}

  def describe(self) -> dict:
    """The scheme's own options, as record fields (default none)."""
    return {}

  def settings(self) -> list:
    """Every setting of the scheme, for a run's checkpoint fingerprint
    (``simulation.loop.checkpoint_key``): a dataclass scheme's fields (a
    family's options that ``describe`` leaves out of the record, FL-CS's
    decoder, Fed-SMP's server steps, included); another's ``describe``.
    Numbers, strings and their tuples as they are; any other value by its
    type (its repr may hold an address, which differs between processes)."""
    if not dataclasses.is_dataclass(self):
      return sorted(self.describe().items())
    return [(f.name, _plain(getattr(self, f.name))) for f in dataclasses.fields(self)]

  def server_examples(self, local: LocalTraining, ratio: float) -> int:
    """Examples the server trains on (forward and backward) in a round at
    compression ratio ``ratio``, for estimates of a run's cost
    (``reproduce.py plan``); default none."""
    del local, ratio
    return 0

  def describe_run(self, constants: Any, noise_multiplier: float) -> dict:
    """Record fields of the run's ``run_constants`` and sigma (default none)."""
    del constants, noise_multiplier
    return {}


def _plain(value: Any) -> Any:
  """A setting as a fingerprint holds it (:meth:`Scheme.settings`)."""
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  if isinstance(value, (tuple, list)):
    return [_plain(v) for v in value]
  return type(value).__qualname__


def _unchanged(scheme: Scheme, options: Mapping[str, Any]) -> Scheme:
  del options
  return scheme


def _given_sigma(scheme: Scheme, options: Mapping[str, Any]) -> float:
  del scheme
  return options["noise_multiplier"]


@dataclasses.dataclass(frozen=True)
class Family:
  """A scheme family's registration: its schemes, options and presets.

  ``fedjax_dp.schemes`` lists the families; a front end (the command line,
  ``fedjax_dp.cli``) offers every family's declared options, configures a
  scheme through its family with the values given and applies the family's
  presets, without knowing any scheme class.

  Attributes:
    title: The family's heading (``--help``).
    schemes: Its schemes by name.
    options: Its options, declared as data (:class:`~fedjax_dp.options.Option`).
    configure: ``configure(scheme, options)``: the scheme with the option
      values applied. ``options`` maps every option's name to its value
      (:meth:`defaults` where none was given) and holds the run's settings
      a family may read: ``dataset``, ``delta``, ``noise_multiplier``.
    presets: Per scheme, the sweep settings it runs with by default (``rounds``,
      ``num_clients``, ``samples_per_client``, ``clients_per_round``,
      ``local_steps``, ``batch_size``, ``lr``) where they differ from the
      UAI 2021 setting; a flag the user gives wins.
    preset_sources: Per scheme, where its preset comes from.
    noise_multiplier: ``noise_multiplier(scheme, options)``: sigma for a run
      (default ``options["noise_multiplier"]``).
  """

  title: str
  schemes: Mapping[str, Scheme]
  options: tuple[Option, ...] = ()
  configure: Callable[[Scheme, Mapping[str, Any]], Scheme] = _unchanged
  presets: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  preset_sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
  noise_multiplier: Callable[[Scheme, Mapping[str, Any]], float] = _given_sigma

  def defaults(self) -> dict[str, Any]:
    """Every option's default, by name."""
    return {option.name: option.default for option in self.options}

  def readers(self, option: Option) -> list[str]:
    """The names of the family's schemes that read ``option``
    (``Option.applies_to``; every one where it is None)."""
    applies = option.applies_to or (lambda scheme: True)
    return [name for name, scheme in self.schemes.items() if applies(scheme)]
