"""Fed-SMP: sparsified model perturbation, and its non-private baselines.

Hu, Gong and Guo, *Federated Learning with Sparsified Model Perturbation:
Improving Accuracy under Client-Level Differential Privacy* (the Fed-SMP
paper), Sec. 4 and Algorithm 2. One round:

1. The server draws a mask of k = r*d coordinates shared by every sampled
   client (Sec. 4: one mask per round, so the sparse updates can be summed
   under secure aggregation on those k coordinates only):

   * rand_k: k coordinates uniformly at random, from the round's shared key;
   * top_k: the server runs its own local training (same optimiser, same
     local period as the clients, Sec. 6.2) from the current global model on
     a small public set held out of the clients' data (Sec. 4, 6.1) and keeps
     the k coordinates of largest |update|. The mask is a function of the
     global model and public data only, never of the round's client data.

2. Each client resets its momentum buffer, runs local momentum SGD from the
   global model (Sec. 6.2), and sparsifies its update with the mask; rand_k
   scales it by d/k so that it is unbiased (Definition 4, Alg. 2 line 46).
3. Fed-SMP clips the *sparsified* update to L2 norm S (line 50) and adds
   Gaussian noise on the k selected coordinates only (line 51): each client a
   share N(0, S^2 sigma^2 / |K|) so that the secure sum carries
   N(0, S^2 sigma^2) per coordinate, the Gaussian mechanism with sensitivity S
   of Sec. 5.1 (``fedjax_dp.privacy.noise``).
4. The server adds the mean to the k masked coordinates (line 16).

The client learning rate decays by a factor (0.99, Sec. 6.2) every round on
Fashion-MNIST and SVHN, every 50 rounds on Shakespeare (``lr_decay_every``).
FedAvg-rand_k / FedAvg-top_k (Sec. 6) are the same without clipping and
noise. Upstream a client sends k values; downstream the server sends the full
model (and, for top_k, the mask, which is not counted).

``DP-FedAvg`` is the Fed-SMP paper's name for DP-FedAvg of McMahan et al.
2018, which is this simulator's FL-STD-DP: an alias with the same behaviour.
The paper's DP-FedAvg with local momentum is Fed-SMP-rand_k at r = 1 (the
mask is every coordinate, d/k = 1; Sec. 6: "When r = 1, Fed-SMP reduces to
DP-FedAvg").
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from fedjax_dp import calibration, datasets, local_training, keys, options
from fedjax_dp.compression import masks
from fedjax_dp.errors import ConfigError
from fedjax_dp.models import FlatModel
from fedjax_dp.schemes.base import Family, LocalTraining, Scheme, SetupData, Traits
from fedjax_dp.schemes.coordinate_subset import MASKED_SCHEMES

SPARSIFIERS = ("randk", "topk")
# Fed-SMP paper Sec. 6.1 (Fashion-MNIST): 1,000 public examples for top_k.
PUBLIC_HOLDOUT = 1000
# Sec. 6.2: the local learning rate decays at a rate of 0.99 every round.
LR_DECAY = 0.99
# Where a data set's setting differs (Shakespeare's learning-rate period, top_k's
# server period and public set on Shakespeare and SVHN), the data set says so
# (``Dataset.option_defaults``): Sec. 6.2 has the server train "with the same
# local update period" as the clients, which on Fashion-MNIST is one step per
# pass over the public set (the default rule).
# Sec. 6.2 names local momentum SGD, but its coefficient did not survive in
# the text this project has; 0.5 is this simulator's choice (see fedjax_dp.paper.presets).
MOMENTUM = 0.5


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["indices", "round", "key", "lr", "public_x", "public_y"],
                   meta_fields=["model", "server_steps", "batch_size"])
@dataclasses.dataclass(frozen=True)
class FedSMPState:
  """The server's Fed-SMP state (a pytree; ``model`` and sizes are static).

  Attributes:
    indices: (k,) sorted int32 coordinates of this round's top_k mask;
      empty for rand_k (drawn in ``round_plan`` from the shared key).
    round: Rounds completed; the learning rate is
      ``eta * decay^floor(round / every)``.
    key: The server's own key for its public-data training (top_k).
    lr: The undecayed learning rate eta of that training (the clients').
    public_x: The server's public examples (top_k; empty for rand_k).
    public_y: Their labels.
    model: The model (static), for the server's public-data training.
    server_steps: Server SGD steps per round on the public set (static).
    batch_size: Their batch size, the clients' |B| (static).
  """

  indices: jax.Array
  round: jax.Array
  key: jax.Array
  lr: jax.Array
  public_x: jax.Array
  public_y: jax.Array
  model: FlatModel | None = None
  server_steps: int = 0
  batch_size: int = 1


@dataclasses.dataclass(frozen=True)
class FedSMPScheme(Scheme):
  """Fed-SMP-rand_k / Fed-SMP-top_k and FedAvg-rand_k / FedAvg-top_k.

  Attributes:
    name: Paper name, e.g. "Fed-SMP-randk".
    sparsifier: "randk" (shared random mask, update scaled by d/k) or "topk"
      (server's top-k mask from its public set).
    private: Clip the sparsified update to S and add Gaussian noise (Fed-SMP);
      False for the FedAvg baselines.
    momentum: Local momentum coefficient beta in [0, 1), reset every round.
    lr_decay: The client (and server) learning rate is multiplied by this
      every ``lr_decay_every`` rounds, in (0, 1] (Sec. 6.2: 0.99).
    lr_decay_every: Rounds between two decays, >= 1 (Sec. 6.2: every round on
      Fashion-MNIST and SVHN, every 50 rounds on Shakespeare): round t
      (from 1) trains at ``eta * lr_decay^floor((t - 1) / lr_decay_every)``.
    public_holdout: Size of the public set held out of the clients' data for
      top_k (Sec. 6.1: 1,000); 0 for rand_k, which needs none.
    server_steps: top_k: the server's SGD steps per round on its public set;
      None: ``server_epochs * ceil(public / |B|)``, or without
      ``server_epochs`` ``T_gd * ceil(public / |B|)``, i.e. as many passes
      over the public set as a client makes over its data when |B| >= |D_k|
      (Sec. 6.2: "the same local update period").
    server_epochs: top_k: the server's passes over its public set per round
      when ``server_steps`` is None (Shakespeare: 1, the clients' 1 local
      epoch); None: T_gd passes.
    reference: Where the scheme is defined.
  """

  name: str
  sparsifier: str
  private: bool
  momentum: float = MOMENTUM
  lr_decay: float = LR_DECAY
  lr_decay_every: int = 1
  public_holdout: int = 0
  server_steps: int | None = None
  server_epochs: int | None = None
  reference: str = "Fed-SMP Sec. 4, Alg. 2"

  @property
  def traits(self) -> Traits:
    """k real values up, the full model down; top_k holds out a public set."""
    # Sec. 6.2: local momentum SGD (its learning-rate decay, its server's top_k pass).
    # Its mask changes every round (rand_k redrawn, top_k recomputed).
    return Traits(dp=self.private, public_holdout=self.public_holdout,
                  local_optimizers=("sgd",), fixed_positions=False)

  def validate(self, num_params: int, ratio: float) -> None:
    """Raises ValueError (one line) for a bad setting."""
    if self.sparsifier not in SPARSIFIERS:
      raise ValueError(f"unknown sparsifier {self.sparsifier!r}; choose one of "
                       f"{', '.join(SPARSIFIERS)}")
    if not 0.0 <= self.momentum < 1.0:
      raise ConfigError("momentum", f"must be in [0, 1), got {self.momentum}")
    if not 0.0 < self.lr_decay <= 1.0:
      raise ConfigError("lr_decay", f"must be in (0, 1], got {self.lr_decay}")
    if (isinstance(self.lr_decay_every, bool) or not isinstance(self.lr_decay_every, int)
        or self.lr_decay_every < 1):
      raise ConfigError("lr_decay_every",
                        f"must be an integer >= 1, got {self.lr_decay_every!r}")
    if self.server_steps is not None and self.server_steps < 1:
      raise ConfigError("server_steps", f"must be >= 1, got {self.server_steps}")
    if self.server_epochs is not None and self.server_epochs < 1:
      raise ValueError(f"server_epochs must be >= 1, got {self.server_epochs}")
    if self.sparsifier == "topk" and self.public_holdout < 1:
      raise ConfigError("public_holdout", f"must be >= 1 for {self.name}, "
                        f"got {self.public_holdout}")
    masks.num_kept(num_params, ratio)  # ratio in (0, 1]

  def num_kept(self, num_params: int, ratio: float) -> int:
    """k = round(r d) values go up (Sec. 6.2: r = k / d)."""
    return masks.num_kept(num_params, ratio)

  def num_downstream(self, num_params: int, ratio: float) -> int:
    """The full model goes down every round (the mask changes each round)."""
    return num_params

  # --- Server: setup, the round's mask, the update. ----------------------

  def lr_scale(self, rounds_done: jax.Array) -> jax.Array:
    """The learning-rate factor of the round after ``rounds_done`` rounds.

    ``lr_decay ** floor(rounds_done / lr_decay_every)``: 1 in round 1, then
    one more factor every ``lr_decay_every`` rounds (Sec. 6.2).
    """
    decays = jnp.floor_divide(rounds_done, self.lr_decay_every).astype(jnp.float32)
    return jnp.power(jnp.float32(self.lr_decay), decays)

  def server_examples(self, local: LocalTraining, ratio: float) -> int:
    """top_k: the server's public-data steps a round times their batch; none
    at r = 1, where the mask keeps every weight (``server_topk``)."""
    if self.sparsifier != "topk" or ratio >= 1.0:
      return 0
    steps = self._server_steps(local, self.public_holdout)
    return steps * min(local.batch_size, self.public_holdout)

  def _server_steps(self, local: LocalTraining, public_size: int) -> int:
    if self.server_steps is not None:
      return self.server_steps
    passes = local.steps if self.server_epochs is None else self.server_epochs
    return passes * math.ceil(public_size / local.batch_size)

  def setup(self, data: SetupData) -> FedSMPState:
    """Initial state; for top_k also the public set and round 1's mask."""
    self.validate(data.w0.shape[0], data.ratio)
    n = data.w0.shape[0]
    key = keys.purpose(data.key, keys.SETUP_SERVER)
    lr = jnp.float32(data.local.lr)
    if self.sparsifier == "randk":
      return FedSMPState(indices=jnp.zeros((0,), jnp.int32), round=jnp.int32(0), key=key,
                         lr=lr, public_x=jnp.zeros((0,), jnp.float32),
                         public_y=jnp.zeros((0,), jnp.int32))
    # Image data comes as float32; Shakespeare's int32 character windows stay
    # integers (the model embeds them).
    public_x = jnp.asarray(data.public_x)
    state = FedSMPState(
        indices=jnp.zeros((0,), jnp.int32), round=jnp.int32(0), key=key, lr=lr,
        public_x=public_x, public_y=jnp.asarray(data.public_y, jnp.int32),
        model=data.model, server_steps=self._server_steps(data.local, public_x.shape[0]),
        batch_size=data.local.batch_size)
    k = self.num_kept(n, data.ratio)
    select = jax.jit(functools.partial(self.server_topk, k=k))
    return dataclasses.replace(state, indices=select(state, data.w0))

  def server_topk(self, state: FedSMPState, w: jax.Array, *, k: int) -> jax.Array:
    """The top_k mask of round ``state.round + 1`` (Sec. 4).

    The server trains from the global model ``w`` on its public set with
    the clients' optimiser (momentum SGD, decayed rate) and keeps the k
    coordinates of largest |update|. Its inputs are the global model, the
    public set and the server's own key: no client data.

    Args:
      state: The server state (public set, key, rate, rounds completed).
      w: (n,) the current global model.
      k: Mask size.

    Returns:
      (k,) sorted int32 indices.
    """
    n = w.shape[0]
    if k >= n:
      return jnp.arange(n, dtype=jnp.int32)
    rate = state.lr * self.lr_scale(state.round)
    w_end = local_training.local_sgd(
        state.model.loss, w, state.public_x, state.public_y,
        jax.random.fold_in(state.key, state.round), steps=state.server_steps,
        batch_size=state.batch_size, lr=rate, momentum=self.momentum)
    return masks.topk_indices(jnp.abs(w_end - w), k)

  def round_plan(self, state: FedSMPState, key: jax.Array, num_params: int,
                 num_kept: int) -> tuple[jax.Array, jax.Array]:
    """(mask indices, learning-rate factor) shared by the round's clients.

    rand_k draws the mask from the round's shared key (as FL-BASIC); top_k
    uses the mask the server computed from the global model.
    """
    scale = self.lr_scale(state.round)
    if num_kept >= num_params:
      return jnp.arange(num_params, dtype=jnp.int32), scale
    if self.sparsifier == "randk":
      return masks.random_indices(key, num_params, num_kept), scale
    return state.indices, scale

  def server_update(self, w: jax.Array, state: FedSMPState, mean: jax.Array,
                    plan: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, FedSMPState]:
    """``w[mask] += mean`` (Alg. 2 line 16); top_k: the next round's mask."""
    indices, _ = plan
    new_w = w.at[indices].add(mean)
    new_state = dataclasses.replace(state, round=state.round + 1)
    if self.sparsifier == "topk":
      new_state = dataclasses.replace(
          new_state, indices=self.server_topk(new_state, new_w, k=indices.shape[0]))
    return new_w, new_state

  # --- Client. ------------------------------------------------------------

  def client_message(self, model: FlatModel, w: jax.Array,
                     plan: tuple[jax.Array, jax.Array], x: jax.Array, y: jax.Array,
                     key: jax.Array, local: LocalTraining) -> jax.Array:
    """Local momentum SGD (fresh buffer), then the sparsified update.

    rand_k: ``(d/k) * delta[mask]``; top_k: ``delta[mask]`` (Alg. 2 lines
    45-49). Clipping and noise follow in ``aggregate`` / ``contributions``.
    """
    indices, scale = plan
    delta = model.local_update(w, x, y, key, steps=local.steps, batch_size=local.batch_size,
                               lr=local.lr * scale, momentum=self.momentum)
    return self.sparsify(delta, indices)

  def sparsify(self, delta: jax.Array, indices: jax.Array) -> jax.Array:
    """The k values sent: ``delta[mask]``, times d/k for rand_k (Def. 4).

    Scaling by d/k makes rand_k unbiased: each coordinate is kept with
    probability k/d, so ``E[decompress(sparsify(delta))] = delta``.
    """
    values = masks.compress(delta, indices)
    if self.sparsifier == "randk":
      values = values * (delta.shape[0] / indices.shape[0])
    return values

  def calibrate_clip(self, data: SetupData, state: FedSMPState) -> float:
    """S from one client-like round on the public data (UAI 2021 Sec. 4).

    The Fed-SMP paper tunes S on a grid (Sec. 6.2); this default applies
    the simulator's usual rule to Fed-SMP's message: the norm of the
    sparsified update of T_gd momentum-SGD steps from w0 on the public data,
    the median over 100 random masks for rand_k (scaled by d/k), round 1's
    mask for top_k.
    """
    n = data.w0.shape[0]
    k = self.num_kept(n, data.ratio)

    def message(train_key, indices):
      w1 = local_training.local_sgd(data.model.loss, data.w0, jnp.asarray(data.public_x),
                            jnp.asarray(data.public_y), train_key, steps=data.local.steps,
                            batch_size=data.local.batch_size, lr=data.local.lr,
                            momentum=self.momentum)
      return self.sparsify(w1 - data.w0, indices)

    if self.sparsifier == "topk" or k >= n:
      return calibration.public_clip_norm(data.key, message,
                                          state.indices if k < n else jnp.arange(n))
    return calibration.public_clip_norm(data.key, message,
                                        random_plan=lambda kk: masks.random_indices(kk, n, k))

  def describe(self) -> dict:
    """Local momentum, learning-rate decay (its period where it is not every
    round) and the public hold-out."""
    period = {} if self.lr_decay_every == 1 else {"lr_decay_every": self.lr_decay_every}
    return {"momentum": self.momentum, "lr_decay": self.lr_decay, **period,
            "public_holdout": self.public_holdout}


def _pair(suffix: str, sparsifier: str, holdout: int) -> list[FedSMPScheme]:
  return [FedSMPScheme("Fed-SMP-" + suffix, sparsifier, True, public_holdout=holdout),
          FedSMPScheme("FedAvg-" + suffix, sparsifier, False, public_holdout=holdout,
                       reference="Fed-SMP Sec. 6 (baseline: no clipping, no noise)")]


# The Fed-SMP paper's name for FL-STD-DP (McMahan et al. 2018): same object
# behaviour (plain local SGD, full update, clip, noise), its own name.
DP_FEDAVG = dataclasses.replace(MASKED_SCHEMES["FL-STD-DP"], name="DP-FedAvg",
                                reference="Fed-SMP Sec. 3.3, Alg. 1 (= FL-STD-DP)")

FEDSMP_SCHEMES = {s.name: s for s in (_pair("randk", "randk", 0) +
                                      _pair("topk", "topk", PUBLIC_HOLDOUT))}
FEDSMP_SCHEMES[DP_FEDAVG.name] = DP_FEDAVG


# The Fed-SMP paper's settings of these schemes (Sec. 6.1-6.2) are the papers' app's presets
# (fedjax_dp.paper.presets.FEDSMP), applied by the command line; on --dataset shakespeare
# and svhn every scheme runs the data set's setting (fedjax_dp.data.settings), with the
# learning-rate period, top_k's server period and public set the data set gives
# (``Dataset.option_defaults``).


def _sparsified(scheme: Scheme) -> bool:
  """Fed-SMP and FedAvg with a mask (DP-FedAvg is FL-STD-DP: plain local SGD)."""
  return isinstance(scheme, FedSMPScheme)


def _server_topk(scheme: Scheme) -> bool:
  """The top_k schemes, whose server trains on a public set."""
  return isinstance(scheme, FedSMPScheme) and scheme.sparsifier == "topk"


# Local momentum, learning-rate decay, the server's top_k training.
OPTIONS = (
    options.Option("momentum", options.unit_interval, None,
                   "local momentum beta in [0, 1), reset every round (default 0.5)",
                   applies_to=_sparsified),
    options.Option("lr_decay", options.number, None,
                   "learning rate factor, in (0, 1], applied every --lr-decay-every rounds "
                   "(default 0.99)", applies_to=_sparsified),
    options.Option("lr_decay_every", options.positive_int, None,
                   "rounds between two learning-rate decays (default: 50 on shakespeare, "
                   "Fed-SMP Sec. 6.2; else 1, every round)", applies_to=_sparsified),
    options.Option("server_steps", int, None,
                   "top_k: server SGD steps per round on its public set (default: "
                   "T_gd * ceil(public / |B|), the clients' local period)",
                   applies_to=_server_topk),
    options.Option("public_holdout", int, None,
                   "top_k: training examples held out of the clients' data as the server's "
                   "public set (default 1000; svhn 2000; Fed-SMP Sec. 6.1)",
                   applies_to=_server_topk),
)


def configure(scheme: Scheme, values: Mapping[str, Any]) -> Scheme:
  """The scheme with the options given (DP-FedAvg has none; None: not given).

  ``lr_decay_every`` not given takes the data set's period (50 rounds on
  shakespeare), else every round; top_k's server period and public set are
  the data set's where it gives them (``Dataset.option_defaults``).
  """
  if not isinstance(scheme, FedSMPScheme):
    return scheme
  given = {"momentum": values.get("momentum"), "lr_decay": values.get("lr_decay"),
           "lr_decay_every": datasets.option_value(values, "lr_decay_every", 1),
           "server_steps": values.get("server_steps"),
           "server_epochs": datasets.option_value(values, "server_epochs")}
  if scheme.sparsifier == "topk":
    given["public_holdout"] = datasets.option_value(values, "public_holdout")
  return dataclasses.replace(scheme, **{k: v for k, v in given.items() if v is not None})


FAMILY = Family("Fed-SMP-randk / -topk, FedAvg-randk / -topk (Fed-SMP paper Sec. 4, "
                "6.1-6.2)", FEDSMP_SCHEMES, options=OPTIONS, configure=configure)
